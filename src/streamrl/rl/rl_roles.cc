#include "streamrl/rl/rl_roles.h"

#include <chrono>

#include "streamrl/core/errors.h"
#include "streamrl/core/log.h"
#include "streamrl/core/threads.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/rl/optim.h"
#include "streamrl/rl/rl_loop.h"
#include "streamrl/rl/train_checkpoint.h"

namespace streamrl::rl {

RlRoles RlRoles::set_up(const RlRunConfig& c) {
  RlRoles r;
  const bool dedicated = core::traits(c.mode).dedicated_generator;
  // Collectives may wait for rank 0's evaluation, hence the generous bound.
  const dist::ProcessGroupOptions pgo = dist::process_group_options_from_env(
      std::chrono::milliseconds(static_cast<int64_t>(c.sample_timeout_s * 1000)));
  if (pgo.world_size > 1) {
    if (!c.sgs_urls.empty()) {
      throw InputError("sgs.urls with several trainer processes is not supported (one run)");
    }
    r.group = std::make_unique<dist::ProcessGroup>(pgo);
  }
  r.rank = pgo.rank;
  r.lead = pgo.rank == 0;
  core::apply_core_budget(dedicated
                              ? c.trainer_threads
                              : (c.run.threads > 0 ? c.run.threads : core::available_cores()));

  r.task = &c.data.load(&r.owned_task);
  r.tokenizer = tokenizer::load_tokenizer(c.init_from);
  r.prompts.emplace(PromptEncoder::for_task(*r.tokenizer, c.init_from, *r.task));
  r.policy = model::load_model(c.init_from);
  if (c.loss.kl.coef > 0) r.reference.emplace(model::load_model(c.init_from));
  r.optimizer = make_adamw(*r.policy, c.optim);

  const auto run_dir = c.run.dir();
  if (c.run.resume) {
    if (auto ck = resume_training_checkpoint(run_dir, r.policy, *r.optimizer)) {
      r.start_iteration = ck->state.at("step").get<int64_t>();
      r.curriculum_state = ck->state.value("curriculum", nlohmann::json());
      SLOG(kInfo) << "resuming " << run_dir.string() << " from iteration " << r.start_iteration;
    }
  } else if (latest_checkpoint(run_dir)) {
    throw InputError(run_dir.string() + " already has checkpoints; set run.resume=true to " +
                     "continue it or choose another run.name");
  }
  if (r.group) {  // every rank starts from rank 0's parameters
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> params = r.policy->parameters();
    r.group->broadcast_from_rank0(params);
  }
  return r;
}

std::unique_ptr<RolloutGenerator> RlRoles::make_generator(const RlRunConfig& c,
                                                          telemetry::Trace* trace) {
  // With sgs.urls, `streamrl serve` processes generate and weights travel over HTTP.
  if (!c.sgs_urls.empty()) {
    return RolloutGenerator::remote(c.sgs_urls, c.sgs_remote, policy, start_iteration);
  }
  engine::EngineConfig ec;
  ec.max_batch_size = c.max_batch_size;
  ec.max_seq_len = static_cast<int>(policy->config().max_position_embeddings);
  ec.trace = trace;
  ec.trace_track = generator_track(rank);
  // Colocated, the engine runs the trainer's module itself (no weight transfer); otherwise a
  // private copy on its own threads and cores.
  return core::traits(c.mode).dedicated_generator
             ? RolloutGenerator::dedicated(policy, ec, c.sgs, start_iteration)
             : RolloutGenerator::colocated(policy, ec, start_iteration);
}

}  // namespace streamrl::rl
