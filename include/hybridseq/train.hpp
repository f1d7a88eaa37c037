#pragma once
/// \file
/// Training: AdamW, clipping, learning-rate schedules, checkpoints, the training loop, progress
/// callbacks (and a terminal progress display for tools).
#include "train/adamw.hpp"
#include "train/checkpoint.hpp"
#include "train/clip.hpp"
#include "train/progress.hpp"
#include "train/schedule.hpp"
#include "train/trainer.hpp"
