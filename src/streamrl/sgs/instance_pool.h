// The SGS instance pool: N generation engines, each on its own thread with its
// own copy of the model and its own core budget. Callers submit requests (with length estimates)
// to instances, usually following a dispatch Assignment; every finished sample streams out at once
// through one thread-safe sink (sample_stream.h). This is the sample stream the RL controller
// consumes.
//
// Each instance keeps its own admission queue: requests enter the engine in the queue's order
// (the Assignment's order: LPT or FIFO) and only while the instance runs fewer than its batch size
// of samples, so one engine serves any per-assignment batch size without being rebuilt.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "streamrl/engine/engine.h"
#include "streamrl/engine/engine_thread.h"
#include "streamrl/sgs/dispatch.h"
#include "streamrl/sgs/sample_stream.h"

namespace streamrl::sgs {

struct PoolConfig {
  int instances = 2;
  int threads_per_instance = 1;  // ATen/OpenBLAS core budget of each instance thread
  engine::EngineConfig engine;   // max_batch_size bounds every instance's batch size; instance k
                                 // traces on track engine.trace_track + k
  std::vector<std::string> devices;  // instance k on devices[k % size]; empty: the CPU
  std::string dtype = "auto";        // model.dtype of the instances' weights (core/device.h)
};

class InstancePool {
 public:
  // Copies `model`'s weights into each instance. Throws InputError on a bad config.
  InstancePool(model::CausalLM& model, const PoolConfig& config, SampleSink sink,
               int64_t weight_version = 0);
  ~InstancePool();  // stops the engine threads; unfinished samples are dropped
  InstancePool(const InstancePool&) = delete;
  InstancePool& operator=(const InstancePool&) = delete;

  int size() const { return static_cast<int>(instances_.size()); }

  // Appends `requests` to instance `instance`'s queue, in order, and lets it run up to
  // `batch_size` samples at once (0 = the engine's max_batch_size). A request's own on_sample,
  // when set, receives its samples instead of the pool's sink. Throws InputError for a bad index,
  // batch size, or request (checked here, before anything is queued).
  void submit(int instance, std::vector<engine::Request> requests, int batch_size = 0);

  // Submits requests[i] for every i in each instance's plan, in plan order and batch size. Every
  // request must appear in the assignment exactly once.
  void submit(std::vector<engine::Request> requests, const Assignment& assignment);

  // Blocks until every submitted sample has been delivered (true) or `timeout` passes (false).
  // Throws RuntimeFailure when an instance's engine failed.
  bool wait(std::chrono::milliseconds timeout);

  // Samples submitted but not yet delivered, over all instances.
  int64_t pending_samples() const;

  // Installs new weights on every instance at its next step boundary; samples admitted afterwards
  // carry `version`. Throws InputError (before touching any instance) for a name/shape mismatch.
  void update_weights(int64_t version, const std::map<std::string, torch::Tensor>& weights);

  engine::EngineStats stats(int instance) const;

 private:
  struct Instance;
  void feed(Instance& inst);
  void on_sample(Instance& inst, engine::Sample&& s, const engine::SampleCallback* own);
  void check_engines() const;

  PoolConfig config_;
  SampleSink sink_;
  std::vector<std::unique_ptr<Instance>> instances_;
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  int64_t pending_ = 0;
};

}  // namespace streamrl::sgs
