// One rank's backward-pass communication under Lina's scheduling rule (arXiv 2210.17223, §4):
// shared parameters' gradients are all-reduced on a communication thread as backward produces
// them, while the expert-parallel all-to-alls run on the backward thread; an ep::CommScheduler
// (the same rule the planner's link simulation runs) decides when an all-reduce (chunk) may start.
// Under "fair_share" (DeepSpeed-MoE's baseline) each gradient goes whole as soon as it is ready,
// beside whatever all-to-all runs; under "lina" gradients go in chunks, never while an all-to-all
// waits or runs, nor while an MoE layer's backward combine computes.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "streamrl/ep/comm_scheduler.h"

namespace streamrl::dist {

class ProcessGroup;

struct BackwardCommStats {
  double all_to_all_s = 0;       // on the backward thread, in backward all-to-alls (waits included)
  double finish_wait_s = 0;      // after backward, waiting for the last all-reduces
  int64_t all_to_all_bytes = 0;  // this rank's side of them
  int all_reduce_ops = 0;        // micro-ops launched
  int all_to_all_ops = 0;
};

class BackwardComm {
 public:
  // Gradients of `parameters` (every rank passes the same list, in the same order, and each gets a
  // gradient in every backward) are summed over `group`. `timeout` bounds finish()'s wait.
  BackwardComm(ProcessGroup& group, std::vector<torch::Tensor> parameters,
               ep::SchedulerOptions options, std::chrono::milliseconds timeout);
  ~BackwardComm();
  BackwardComm(const BackwardComm&) = delete;
  BackwardComm& operator=(const BackwardComm&) = delete;

  // Arms the gradient hooks for the next backward (the last micro-batch's, where gradients
  // accumulate) under `policy`; every rank arms alike. With `defer`, nothing is reduced before
  // finish(): backward and its all-to-alls see an idle link (a profile of each part alone).
  void begin(ep::Policy policy, bool defer = false);
  // Waits until every gradient is reduced and writes the sums into the parameters' .grad.
  // Rethrows a failed collective; TimeoutError past the timeout. Returns this backward's stats.
  BackwardCommStats finish();

  // Called by the expert-parallel exchange's backward (ExpertParallelGroup).
  void combine_begins();
  void all_to_all_begins(int64_t bytes);  // blocks until the policy launches it
  void all_to_all_ends();

  // Runs `f` when this object is destroyed (an exchange that reports here forgets it).
  void on_close(std::function<void()> f) { on_close_ = std::move(f); }

 private:
  void on_gradient(size_t index, const torch::Tensor& grad);
  void pump_locked();  // launches what the scheduler allows now
  void run();          // the communication thread

  ProcessGroup& group_;
  std::vector<torch::Tensor> parameters_;
  std::vector<unsigned> hooks_;
  ep::SchedulerOptions options_;
  std::chrono::milliseconds timeout_;

  std::mutex mu_;
  std::condition_variable cv_;
  ep::CommScheduler scheduler_;
  bool armed_ = false, stop_ = false, defer_ = false, finishing_ = false;
  std::exception_ptr error_;
  // Gradients are submitted in reverse parameter order (about the order backward yields them),
  // each once it and all before it are ready, so every rank launches the same sequence.
  std::vector<torch::Tensor> sums_;
  size_t next_submit_ = 0;
  std::vector<ep::MicroOp> to_reduce_;  // launched all-reduce micro-ops for the thread
  bool a2a_granted_ = false;
  ep::MicroOp a2a_op_{};
  int a2a_count_ = 0;
  std::chrono::steady_clock::time_point a2a_start_;
  BackwardCommStats stats_;
  std::function<void()> on_close_;
  std::thread thread_;
};

}  // namespace streamrl::dist
