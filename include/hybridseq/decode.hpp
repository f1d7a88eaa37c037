#pragma once
/// \file
/// Decoding: generation sessions with snapshot/restore (the per-layer protocol is in
/// core/decoding.hpp).
#include "core/decoding.hpp"
#include "decode/session.hpp"
