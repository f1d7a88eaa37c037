#pragma once
/// \file
/// Training: AdamW, clipping, schedules, checkpoints, the training loop and its progress display.
#include "train/adamw.hpp"
#include "train/checkpoint.hpp"
#include "train/clip.hpp"
#include "train/progress.hpp"
#include "train/schedule.hpp"
#include "train/trainer.hpp"
