#pragma once
/// \file
/// Umbrella for hybridseq::tasks: the synthetic tasks of Cooper et al. (arXiv 2603.08859) and
/// Zoology's MQAR (generators, batches, metrics, registry), and the byte-level text corpus.

#include "tasks/associative_recall.hpp"
#include "tasks/batch.hpp"
#include "tasks/decode_recall.hpp"
#include "tasks/draws.hpp"
#include "tasks/example.hpp"
#include "tasks/metrics.hpp"
#include "tasks/mqar.hpp"
#include "tasks/needle.hpp"
#include "tasks/registry.hpp"
#include "tasks/selective_copy.hpp"
#include "tasks/text_corpus.hpp"
#include "tasks/to_device.hpp"
#include "tasks/vocabulary.hpp"
