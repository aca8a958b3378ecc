#include "streamrl/sgs/instance_pool.h"

#include <deque>

#include "streamrl/core/errors.h"
#include "streamrl/core/threads.h"
#include "streamrl/model/checkpoint.h"

namespace streamrl::sgs {

struct InstancePool::Instance {
  int index = 0;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<engine::EngineThread> thread;  // declared after engine: stops before it dies
  std::mutex mu;
  std::deque<engine::Request> queue;  // admission order
  int batch_size = 0;
  int running = 0;    // samples handed to the engine and not yet finished
  std::string error;  // a request the engine refused while feeding
};

InstancePool::InstancePool(model::CausalLM& model, const PoolConfig& config, SampleSink sink,
                           int64_t weight_version)
    : config_(config), sink_(std::move(sink)) {
  if (config_.instances < 1) throw InputError("sgs pool: instances must be >= 1");
  if (config_.threads_per_instance < 1) {
    throw InputError("sgs pool: threads_per_instance must be >= 1");
  }
  // The pool's queues decide the order; the engine admits what it is fed as it arrives.
  config_.engine.admission = engine::AdmissionPolicy::kFifo;
  for (int k = 0; k < config_.instances; ++k) {
    auto inst = std::make_unique<Instance>();
    inst->index = k;
    model::CausalLM copy = model::copy_model(model, "sgs pool copy");
    if (!config_.devices.empty()) {
      model::place_for_inference(copy, config_.devices[k % config_.devices.size()], config_.dtype,
                                 "sgs.devices");
    }
    copy->eval();
    engine::EngineConfig ec = config_.engine;
    ec.trace_track += k;  // one trace track per instance
    inst->engine = std::make_unique<engine::Engine>(copy, ec, weight_version);
    inst->batch_size = inst->engine->config().max_batch_size;
    const int threads = config_.threads_per_instance;
    inst->thread = std::make_unique<engine::EngineThread>(
        *inst->engine, [threads] { core::apply_core_budget(threads); });
    instances_.push_back(std::move(inst));
  }
}

InstancePool::~InstancePool() {
  for (auto& inst : instances_) inst->thread->stop();
}

namespace {

void validate(const engine::Engine& eng, int instance, const std::vector<engine::Request>& reqs,
              int batch_size) {
  const std::string where = "sgs instance " + std::to_string(instance);
  const auto& ec = eng.config();
  if (batch_size < 1 || batch_size > ec.max_batch_size) {
    throw InputError(where + ": batch size " + std::to_string(batch_size) + " outside [1, " +
                     std::to_string(ec.max_batch_size) + "]");
  }
  for (const auto& r : reqs) {
    const std::string id = where + ": request " + std::to_string(r.request_id);
    if (r.prompt_ids.empty()) throw InputError(id + ": empty prompt");
    if (r.n < 1 || r.n > batch_size) {
      throw InputError(id + ": n = " + std::to_string(r.n) + " outside [1, batch size " +
                       std::to_string(batch_size) + "]");
    }
    if (r.params.max_new_tokens < 1 ||
        static_cast<int64_t>(r.prompt_ids.size()) + r.params.max_new_tokens > ec.max_seq_len) {
      throw InputError(id + ": prompt + max_new_tokens must be in [2, max_seq_len " +
                       std::to_string(ec.max_seq_len) + "]");
    }
  }
}

}  // namespace

void InstancePool::submit(int instance, std::vector<engine::Request> requests, int batch_size) {
  if (instance < 0 || instance >= size()) {
    throw InputError("sgs pool: no instance " + std::to_string(instance));
  }
  Instance& inst = *instances_[instance];
  if (batch_size == 0) batch_size = inst.engine->config().max_batch_size;
  validate(*inst.engine, instance, requests, batch_size);
  int64_t samples = 0;
  for (const auto& r : requests) samples += r.n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ += samples;
  }
  {
    std::lock_guard<std::mutex> lock(inst.mu);
    inst.batch_size = batch_size;
    for (auto& r : requests) inst.queue.push_back(std::move(r));
  }
  feed(inst);
}

void InstancePool::submit(std::vector<engine::Request> requests, const Assignment& assignment) {
  if (static_cast<int>(assignment.instances.size()) != size()) {
    throw InputError("sgs pool: assignment is for " + std::to_string(assignment.instances.size()) +
                     " instances, the pool has " + std::to_string(size()));
  }
  std::vector<int> seen(requests.size(), 0);
  for (const auto& plan : assignment.instances) {
    for (size_t i : plan.order) {
      if (i >= requests.size() || seen[i]++) {
        throw InputError("sgs pool: assignment does not cover the requests exactly once");
      }
    }
  }
  for (int v : seen) {
    if (v != 1) throw InputError("sgs pool: assignment does not cover the requests exactly once");
  }
  std::vector<std::vector<engine::Request>> per(size());
  for (int k = 0; k < size(); ++k) {
    for (size_t i : assignment.instances[k].order) per[k].push_back(std::move(requests[i]));
    validate(*instances_[k]->engine, k, per[k], assignment.instances[k].batch_size);
  }
  for (int k = 0; k < size(); ++k) {
    if (!per[k].empty()) submit(k, std::move(per[k]), assignment.instances[k].batch_size);
  }
}

void InstancePool::feed(Instance& inst) {
  std::lock_guard<std::mutex> lock(inst.mu);
  while (!inst.queue.empty() && inst.running + inst.queue.front().n <= inst.batch_size) {
    engine::Request r = std::move(inst.queue.front());
    inst.queue.pop_front();
    auto own = std::make_shared<engine::SampleCallback>(std::move(r.on_sample));
    r.on_sample = [this, &inst, own](engine::Sample&& s) {
      on_sample(inst, std::move(s), own.get());
    };
    inst.running += r.n;
    try {
      inst.engine->add_request(std::move(r));
    } catch (const std::exception& e) {
      inst.error = e.what();  // surfaced by wait(); validate() makes this unexpected
      return;
    }
  }
}

void InstancePool::on_sample(Instance& inst, engine::Sample&& s,
                             const engine::SampleCallback* own) {
  if (own && *own) {
    (*own)(std::move(s));
  } else if (sink_) {
    sink_(inst.index, std::move(s));
  }
  {
    std::lock_guard<std::mutex> lock(inst.mu);
    inst.running -= 1;
  }
  feed(inst);
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ -= 1;
  }
  done_cv_.notify_all();
}

void InstancePool::check_engines() const {
  for (const auto& inst : instances_) {
    std::string err = inst->thread->error();
    if (err.empty()) {
      std::lock_guard<std::mutex> lock(inst->mu);
      err = inst->error;
    }
    if (!err.empty()) {
      throw RuntimeFailure("sgs instance " + std::to_string(inst->index) + " failed: " + err);
    }
  }
}

bool InstancePool::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    check_engines();
    std::unique_lock<std::mutex> lock(mu_);
    // Wake at least every 50 ms to notice a failed engine, which delivers nothing more.
    const auto slice =
        std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
    if (done_cv_.wait_until(lock, slice, [&] { return pending_ == 0; })) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

int64_t InstancePool::pending_samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

void InstancePool::update_weights(int64_t version,
                                  const std::map<std::string, torch::Tensor>& weights) {
  // The first engine validates names and shapes before any instance is changed.
  for (auto& inst : instances_) inst->engine->update_weights(version, weights);
}

engine::EngineStats InstancePool::stats(int instance) const {
  if (instance < 0 || instance >= size()) {
    throw InputError("sgs pool: no instance " + std::to_string(instance));
  }
  return instances_[instance]->engine->stats();
}

}  // namespace streamrl::sgs
