// Several remote SGS instances (`streamrl serve` URLs) behind one submit(), for a trainer whose
// generation runs on other processes or machines. An instance that dies loses no
// prompt: its unfinished requests are re-dispatched to the live ones.
#pragma once

#include <chrono>
#include <condition_variable>
#include <optional>

#include "streamrl/dist/remote_sgs.h"
#include "streamrl/sgs/sample_stream.h"

namespace streamrl::dist {

// The generation side of an RL run over `streamrl serve` URLs (what rl::RolloutGenerator is for
// in-process engines). Each request goes to the live instance with the fewest outstanding samples.
// When an instance fails, it is marked dead and its unfinished requests go to the live ones, their
// samples renumbered so each group still has sample indices 0..n-1.
class RemoteSgsPool {
 public:
  // `sink` receives every finished sample with the index in `urls` of the instance that produced
  // it, as sgs::InstancePool's sink does (on client threads). Without options.run_id the pool
  // draws a fresh run id. Throws InputError for no URLs.
  RemoteSgsPool(const std::vector<std::string>& urls, RemoteSgsOptions options,
                sgs::SampleSink sink);
  ~RemoteSgsPool();

  // Queues `requests` (their on_sample is ignored; samples go to the pool's sink). Throws
  // RuntimeFailure when no instance is alive.
  void submit(std::vector<engine::Request> requests);

  // Pushes `version` to every live instance in parallel; an instance that fails the push gets no
  // more requests (its open streams re-dispatch their requests if they fail). Throws
  // RuntimeFailure when no instance installed it.
  void update_weights(int64_t version,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors);

  // Throws RuntimeFailure (with the instances' errors) when every instance is dead.
  void check_alive() const;
  // URLs of the live instances.
  std::vector<std::string> live_urls() const;
  // Mean engine busy seconds of the live instances since they started (their /health). When one
  // does not answer (it is then failed, as by the watchdog) or report it: the wall time during
  // which samples of this pool were outstanding.
  double busy_seconds();
  // The run id sent with weights and requests.
  const std::string& run_id() const { return options_.run_id; }
  // Requests re-dispatched after a failure, since construction.
  int64_t redispatched_requests() const { return redispatched_.load(); }

 private:
  struct Group {
    std::vector<int32_t> index_map;  // sample_index on the current instance -> original index
    int remaining = 0;               // samples not yet delivered
  };

  void dispatch(std::vector<engine::Request> requests);
  void on_failure(size_t instance, FailedRequests failed);
  void mark_dead(size_t instance, const std::string& error);  // requires mu_
  // Marks an instance that stopped answering dead and fails its open streams (their requests
  // are re-dispatched).
  void fail_instance(size_t instance, const std::string& error);
  void watch_health();
  // The live instances' mean /health busy seconds; nullopt when one does not answer or report it.
  std::optional<double> reported_busy_seconds();

  const RemoteSgsOptions options_;
  const sgs::SampleSink sink_;
  std::atomic<bool> closing_{false};
  std::vector<std::unique_ptr<RemoteSgsClient>> clients_;
  mutable std::mutex mu_;
  std::vector<bool> dead_;
  std::vector<std::string> errors_;
  std::map<int64_t, Group> groups_;  // by request id, until all its samples arrived
  int64_t outstanding_ = 0;          // samples submitted and not yet delivered
  std::chrono::steady_clock::time_point busy_since_;  // when outstanding_ last left 0
  double busy_total_s_ = 0;  // wall time of the earlier periods with samples outstanding
  std::atomic<int64_t> redispatched_{0};
  std::condition_variable wake_;  // ends the health watchdog's wait early on shutdown
  std::thread watchdog_;
};

}  // namespace streamrl::dist
