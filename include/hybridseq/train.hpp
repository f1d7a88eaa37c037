#pragma once
/// \file
/// Umbrella for hybridseq::train: AdamW, learning-rate schedules, gradient clipping.

#include "train/adamw.hpp"
#include "train/clip.hpp"
#include "train/schedule.hpp"
