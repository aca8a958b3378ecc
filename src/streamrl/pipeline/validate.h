// Validity of a pipeline schedule, checked before anything runs or is emulated: an invalid
// schedule would hang the executor's point-to-point exchanges or train on the wrong tensors.
#pragma once

#include <string>

#include "streamrl/pipeline/schedule.h"

namespace streamrl::pipeline {

struct ValidateOptions {
  // Require each link (stage pair and direction) to receive its messages in the order they were
  // sent: needed by a transport that matches point-to-point messages in order (NCCL), not by one
  // that matches them by tag (Gloo). Default false.
  bool in_order_links = false;
};

// Empty when `schedule` is valid, else one line naming the first problem and the ops involved.
// Checks, in order: shape (ops per stage, chunk and micro-batch ranges); every (micro-batch,
// chunk) forward and backward appears exactly once on every stage; on each stage a micro-batch's
// forwards run in chunk order, its backwards in reverse chunk order and each forward before its
// backward; then a run with dependency waits (forward of virtual stage v after v-1, backward of v
// after v+1) reaches the end: with every op present once every send has its receive, so what is
// left is a circular wait, reported with each blocked stage's op and what it waits for.
std::string validate(const Schedule& schedule, const ValidateOptions& options = {});

}  // namespace streamrl::pipeline
