#pragma once
/// \file
/// Umbrella for hybridseq::core: spaces, tensors, errors and checks, flat tuple, concepts,
/// RNG and initialisers, dropout masks and training passes, workspace, parameters and their
/// visitor, the final-gradient listener, describe().

#include "core/check.hpp"
#include "core/concepts.hpp"
#include "core/decoding.hpp"
#include "core/describe.hpp"
#include "core/dropout.hpp"
#include "core/error.hpp"
#include "core/flat_tuple.hpp"
#include "core/gradient_listener.hpp"
#include "core/huge_pages.hpp"
#include "core/kokkos_compat.hpp"
#include "core/literal.hpp"
#include "core/parallel.hpp"
#include "core/parameter.hpp"
#include "core/rng.hpp"
#include "core/spaces.hpp"
#include "core/threads.hpp"
#include "core/time_slice.hpp"
#include "core/workspace.hpp"
