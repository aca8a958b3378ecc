#include "streamrl/rl/rl_run_config.h"

#include <string>

#include "streamrl/core/device.h"
#include "streamrl/core/errors.h"
#include "streamrl/tasks/task.h"

namespace streamrl::rl {

RlRunConfig RlRunConfig::from_config(const core::Config& root) {
  RlRunConfig c;
  c.optim.lr = 1e-4;  // RL fine-tuning default: much smaller than SFT's
  c.optim.min_lr_ratio = 1.0;
  c.optim.weight_decay = 0.0;
  c.run.read(root.section("run"));
  c.mode = core::read_mode(root, "mode", c.mode);
  core::Config policy = root.section("policy");
  c.init_from = policy.require<std::string>("init_from");
  c.data.read(root.section("data"));
  core::Config rollout = root.section("rollout");
  rollout.get("prompts_per_iteration", c.prompts_per_iteration);
  rollout.get("group_size", c.group_size);
  rollout.get("max_new_tokens", c.max_new_tokens);
  rollout.get("max_turns", c.max_turns);
  rollout.get("temperature", c.temperature);
  rollout.get("top_p", c.top_p);
  rollout.get("max_batch_size", c.max_batch_size);
  core::Config dynamic = rollout.section("dynamic_sampling");
  dynamic.get("enabled", c.dynamic_sampling.enabled);
  c.dynamic_sampling.max_refills = c.prompts_per_iteration;
  dynamic.get("max_refills", c.dynamic_sampling.max_refills);
  core::Config train = root.section("train");
  train.get("iterations", c.iterations);
  train.get("mini_batches", c.mini_batches);
  train.get("micro_batch_tokens", c.update.micro_batch_tokens);
  train.get("recompute_old_logprobs", c.update.recompute_old_logprobs);
  c.update.temperature = c.temperature;
  c.optim.total_steps = c.iterations;
  c.optim.read(train.section("optim"));
  c.optim.total_steps = c.iterations;
  core::Config algo = root.section("algo");
  c.adv.read(algo);
  c.loss.read(algo);
  c.overlong.read(algo);
  root.section("resources").get("trainer_threads", c.trainer_threads);
  sgs::SgsConfig sgs_defaults;
  sgs_defaults.instances = 1;
  sgs_defaults.dispatch.policy = sgs::DispatchPolicy::kLeastLoaded;
  c.sgs = sgs::SgsConfig::read(root.section("sgs"), sgs_defaults);
  root.section("sgs").get("urls", c.sgs_urls);
  c.moe.read(root.section("model").section("moe"));
  c.sparse.read(root.section("model").section("sparse_attention"));
  root.section("model").get("dtype", c.dtype);
  core::check_dtype_name(c.dtype);
  c.sgs.dtype = c.dtype;
  algo.get("moe_routing_replay", c.moe.routing_replay);
  algo.get("moe_curriculum", c.update.moe_curriculum);
  c.sgs_remote = dist::RemoteSgsOptions::read(root.section("sgs"));
  root.section("async").get("max_staleness", c.max_staleness);
  rollout.get("sample_timeout_s", c.sample_timeout_s);
  root.section("telemetry").get("trace", c.trace);
  root.section("telemetry").get("tensorboard", c.tensorboard);
  root.section("telemetry").get("samples", c.sample_log);
  read_eval(root.section("eval"), &c.eval_every, &c.eval);
  c.checkpoint.read(root.section("checkpoint"));
  c.parallel.read(root.section("parallel"), /*train=*/true);
  root.check_all_used();
  if (!c.sgs_urls.empty() && !core::traits(c.mode).dedicated_generator) {
    throw InputError("sgs.urls: remote generation needs a dedicated mode (disagg, stream, async)");
  }
  if (c.max_turns < 1) throw InputError("rollout.max_turns must be >= 1");
  // A tool-using task's rollouts run inside the engines; remote ones are told the tools.
  if (c.data.jsonl.empty()) c.sgs_remote.tools = tasks::get_task(c.data.task).tools();
  c.sgs_remote.max_turns = c.max_turns;
  if (c.trainer_threads < 1 || c.max_staleness < 0 || !(c.sample_timeout_s > 0)) {
    throw InputError(
        "resources.trainer_threads must be >= 1, async.max_staleness >= 0 and "
        "rollout.sample_timeout_s > 0");
  }
  if (c.iterations < 1 || c.prompts_per_iteration < 1 || c.group_size < 1) {
    throw InputError(
        "train.iterations, rollout.prompts_per_iteration and rollout.group_size must be >= 1");
  }
  if (c.mini_batches < 1 || c.mini_batches > c.prompts_per_iteration) {
    throw InputError("train.mini_batches (" + std::to_string(c.mini_batches) +
                     ") must be between 1 and rollout.prompts_per_iteration (" +
                     std::to_string(c.prompts_per_iteration) + ")");
  }
  if (c.group_size > c.max_batch_size) {
    throw InputError("rollout.group_size (" + std::to_string(c.group_size) +
                     ") exceeds rollout.max_batch_size (" + std::to_string(c.max_batch_size) + ")");
  }
  if (c.max_new_tokens < 1 || !(c.temperature > 0)) {
    throw InputError("rollout.max_new_tokens >= 1 and rollout.temperature > 0 required");
  }
  if (c.dynamic_sampling.max_refills < 0) {
    throw InputError("rollout.dynamic_sampling.max_refills must be >= 0");
  }
  if (c.overlong.buffer >= c.max_new_tokens) {
    throw InputError("algo.overlong.buffer (" + std::to_string(c.overlong.buffer) +
                     ") must be below rollout.max_new_tokens (" + std::to_string(c.max_new_tokens) +
                     ")");
  }
  return c;
}

}  // namespace streamrl::rl
