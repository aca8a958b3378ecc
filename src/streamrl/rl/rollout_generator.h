// The generation side of an RL run: continuous-batching engines that stream every
// finished sample into one queue the trainer drains. Colocated, one engine shares the trainer's
// module and runs on the caller's thread when asked. Dedicated, an SGS instance pool (sgs/) owns
// copies of the weights, each instance on its own thread and cores; each iteration's requests are
// dispatched over the instances (random, least-loaded or skew-aware with the length ranker) and
// new weights arrive through update_weights(). Remote, the instances are `streamrl serve`
// processes reached by URL (dist::RemoteSgsPool) and weights travel over HTTP.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "streamrl/dist/remote_sgs_pool.h"

#include "streamrl/engine/engine.h"
#include "streamrl/sgs/instance_pool.h"
#include "streamrl/sgs/length_ranker.h"
#include "streamrl/sgs/sgs_config.h"

namespace streamrl::rl {

class RolloutGenerator {
 public:
  // Colocated: `model` is the trainer's own module; nothing runs until drive_until_idle().
  static std::unique_ptr<RolloutGenerator> colocated(model::CausalLM model,
                                                     const engine::EngineConfig& config,
                                                     int64_t weight_version);
  // Dedicated: the pool copies `model`'s weights into `sgs.instances` instances whose threads start
  // at once. For skew-aware dispatch a PTL profile is read from sgs.profile or measured here.
  static std::unique_ptr<RolloutGenerator> dedicated(model::CausalLM& model,
                                                     const engine::EngineConfig& config,
                                                     const sgs::SgsConfig& sgs,
                                                     int64_t weight_version);
  // Remote: `streamrl serve` instances at `urls`, least-loaded dispatch, a dead instance's
  // requests re-dispatched to the live ones. This process is a new run for the instances:
  // `model`'s weights are pushed to them as `weight_version` here, so the first iteration never
  // runs on another run's (or an earlier attempt's) weights. Waits are bounded by `options`.
  static std::unique_ptr<RolloutGenerator> remote(const std::vector<std::string>& urls,
                                                  const dist::RemoteSgsOptions& options,
                                                  model::CausalLM& model, int64_t weight_version);
  ~RolloutGenerator();

  // Queues one iteration's requests; dedicated, they are dispatched over the instances. Samples go
  // to queue() as they finish.
  void submit(std::vector<engine::Request> requests);
  sgs::SampleQueue& queue() { return queue_; }

  // Per-sample feedback for the length ranker and the rolling length distribution (dedicated
  // skew-aware dispatch; a no-op otherwise). Call end_iteration() once per iteration; it returns
  // the ranker's metrics when it refitted.
  void observe(const engine::Sample& sample);
  std::optional<nlohmann::json> end_iteration();

  // Colocated only: runs the engine on this thread until nothing is waiting or running.
  void drive_until_idle();

  // The in-process weight channel. Dedicated: copies the parameters of `trainer` (so training may
  // continue at once) and installs them as `version` at each instance's next step boundary.
  // Colocated: the trainer changed the shared module in place; later samples carry `version`.
  void update_weights(int64_t version, model::CausalLM& trainer);

  // Remote: pushes `trainer`'s weights to every live instance and returns once they installed
  // them (samples of later requests carry `version`).

  // Throws RuntimeFailure when an engine thread has died (with its error), or remote, when every
  // instance is dead.
  void check_alive();

  bool dedicated() const { return pool_ != nullptr || remote_ != nullptr; }
  // Engine busy time summed over instances, divided by their number (the role's mean busy time).
  // Remote: the instances' own, or when one does not report it, the wall time during which
  // samples were outstanding.
  double busy_seconds() const;
  int instances() const;

 private:
  RolloutGenerator() = default;

  sgs::SampleQueue queue_;
  std::unique_ptr<engine::Engine> engine_;   // colocated
  std::unique_ptr<sgs::InstancePool> pool_;  // dedicated
  sgs::SgsConfig sgs_;
  std::optional<engine::Profile> profile_;  // skew-aware only
  sgs::LengthWindow lengths_;
  std::unique_ptr<sgs::LengthRanker> ranker_;
  std::unique_ptr<sgs::OnlineRankerTrainer> ranker_trainer_;
  bool ranker_fitted_ = false;

  // Remote. Declared after queue_: the pool's client threads push into it until it is destroyed.
  std::unique_ptr<dist::RemoteSgsPool> remote_;
  int remote_instances_ = 0;
};

}  // namespace streamrl::rl
