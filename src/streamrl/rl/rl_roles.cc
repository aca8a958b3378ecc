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

std::vector<std::string> urls_of_rank(const std::vector<std::string>& urls, int rank, int world) {
  if (urls.empty() || world <= 1) return urls;
  if (static_cast<int>(urls.size()) < world) {
    throw InputError("sgs.urls lists " + std::to_string(urls.size()) + " instance(s) for " +
                     std::to_string(world) + " trainer ranks (WORLD_SIZE); each rank needs one");
  }
  std::vector<std::string> mine;
  for (size_t i = rank; i < urls.size(); i += world) mine.push_back(urls[i]);
  return mine;
}

namespace {

// Expert parallelism: `whole` becomes a copy of the policy, the policy keeps this rank's experts,
// and the optimizer is rebuilt over what it keeps.
void split_experts(const RlRunConfig& c, const RunOptions& run, RlRoles* r) {
  const std::string ep = "parallel.ep = " + std::to_string(c.parallel.ep);
  if (!r->policy->config().is_moe()) {
    throw InputError(ep + " needs an MoE policy; " + c.init_from + " is dense");
  }
  if (!r->group) {
    throw InputError(ep +
                     " needs its ranks: run under streamrl launch --nproc N, N a multiple of ep");
  }
  if (c.sparse.enabled) {
    throw InputError("model.sparse_attention cannot be combined with parallel.ep");
  }
  r->experts = std::make_unique<dist::ExpertDataParallel>(*r->group, c.parallel.ep);
  r->experts->experts()->set_chunks(c.parallel.ep_chunks);
  // The unsharded model: the policy's weights (resumed or not) before it keeps its experts only.
  r->whole = model::copy_model(r->policy, "the policy");
  place_trained_model(r->whole, run, c.dtype);
  model::shard_experts(*r->policy, r->experts->experts());
  r->optimizer = make_adamw(*r->policy, c.optim);
}

}  // namespace

RlRoles RlRoles::set_up(const RlRunConfig& c) {
  RlRoles r;
  const bool dedicated = core::traits(c.mode).dedicated_generator;
  // Collectives may wait for rank 0's evaluation, hence the generous bound.
  const dist::ProcessGroupOptions pgo = dist::process_group_options_from_env(
      std::chrono::milliseconds(static_cast<int64_t>(c.sample_timeout_s * 1000)));
  r.sgs_urls = urls_of_rank(c.sgs_urls, pgo.rank, pgo.world_size);
  if (pgo.world_size > 1) r.group = std::make_unique<dist::ProcessGroup>(pgo);
  r.rank = pgo.rank;
  r.lead = pgo.rank == 0;
  core::apply_core_budget(dedicated
                              ? c.trainer_threads
                              : (c.run.threads > 0 ? c.run.threads : core::available_cores()));

  r.task = &c.data.load(&r.owned_task);
  r.tokenizer = tokenizer::load_tokenizer(c.init_from);
  r.prompts.emplace(PromptEncoder::for_task(*r.tokenizer, c.init_from, *r.task));
  r.policy = model::load_model(c.init_from);
  r.policy->set_gating(c.moe.gating);
  RunOptions run = c.run;
  if (run.device == "cuda" && pgo.world_size > 1) {
    run.device =
        "cuda:" + std::to_string(pgo.rank % std::max<int64_t>(1, torch::cuda::device_count()));
  }
  r.device = run.device;
  place_trained_model(r.policy, run, c.dtype);
  if (c.loss.kl.coef > 0) {
    // Frozen: no master weights needed, so it holds (and computes in) the compute dtype.
    r.reference.emplace(model::load_model(c.init_from));
    (*r.reference)->set_gating(c.moe.gating);
    model::place_for_inference(*r.reference, run.device, c.dtype, "run.device");
  }
  r.optimizer = make_adamw(*r.policy, c.optim);

  // Rank 0 alone reads the run directory (another rank may be on another host, with a run
  // directory of its own) and sends every rank what it resumed.
  const auto run_dir = c.run.dir();
  nlohmann::json resumed = {{"step", 0}};
  std::string sparse_optimizer;  // DSV's predictors' Adam state (one process: no broadcast)
  // Expert parallelism: the checkpoint's optimizer state of each expert rank (rank 0), then this
  // rank's, loaded once its optimizer holds its experts only.
  std::vector<std::string> ep_states;
  std::string ep_state;
  const int ep = c.parallel.ep;
  if (r.lead && c.run.resume) {
    check_checkpoint_parallelism(run_dir, ep);
    auto ck = ep > 1 ? resume_training_checkpoint(run_dir, r.policy, ep_optimizer_files(ep))
                     : resume_training_checkpoint(run_dir, r.policy, *r.optimizer);
    if (ck) {
      resumed = ck->state;
      sparse_optimizer = std::move(ck->sparse_optimizer);
      ep_states = std::move(ck->optimizer_states);
      SLOG(kInfo) << "resuming " << run_dir.string() << " from iteration "
                  << resumed.at("step").get<int64_t>();
    }
  } else if (r.lead && latest_checkpoint(run_dir)) {
    throw InputError(run_dir.string() + " already has checkpoints; set run.resume=true to " +
                     "continue it or choose another run.name");
  }
  if (r.group) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> params = r.policy->parameters();
    r.group->broadcast_from_rank0(params);
    resumed = nlohmann::json::parse(r.group->broadcast_bytes_from_rank0(resumed.dump()));
    if (resumed.at("step").get<int64_t>() > 0 && ep > 1) {
      const dist::ParallelLayout layout(r.group->world_size(), ep, r.group->rank());
      ep_state = receive_expert_optimizer_state(*r.group, ep_states, ep, layout.ep_rank());
    } else if (resumed.at("step").get<int64_t>() > 0) {
      const std::string state =
          r.group->broadcast_bytes_from_rank0(r.lead ? optimizer_bytes(*r.optimizer) : "");
      if (!r.lead) load_optimizer_bytes(*r.optimizer, state);
    }
  }
  r.whole = r.policy;
  if (ep > 1) {
    split_experts(c, run, &r);
    if (!ep_state.empty()) load_optimizer_bytes(*r.optimizer, ep_state);
  }
  // DSV after the resume, which may have brought back the predictors. Without it the reference
  // scores dense too.
  r.sparse = model::start_sparse_attention(r.policy, c.sparse,
                                           resumed.value("sparse_attention", nlohmann::json()),
                                           r.group ? r.group->world_size() : 1);
  resume_sparse_optimizer(sparse_optimizer, r.sparse.get());
  if (!r.sparse && r.reference) (*r.reference)->disable_sparse_attention();
  r.start_iteration = resumed.at("step").get<int64_t>();
  r.curriculum_state = resumed.value("curriculum", nlohmann::json());
  return r;
}

std::unique_ptr<RolloutGenerator> RlRoles::make_generator(const RlRunConfig& c,
                                                          telemetry::Trace* trace) {
  // With sgs.urls, `streamrl serve` processes generate and weights travel over HTTP.
  if (!c.sgs_urls.empty()) {
    return RolloutGenerator::remote(sgs_urls, c.sgs_remote, whole, start_iteration);
  }
  engine::EngineConfig ec;
  ec.max_batch_size = c.max_batch_size;
  ec.max_seq_len = static_cast<int>(whole->config().max_position_embeddings);
  ec.trace = trace;
  ec.trace_track = generator_track(rank);
  ec.record_routing = whole->config().is_moe();  // for routing replay and its mismatch metric
  // Colocated, the engine runs the trainer's module itself (no weight transfer); otherwise a
  // private copy on its own threads and cores.
  sgs::SgsConfig sgs = c.sgs;
  sgs.dispatch.max_batch_size = c.generation_batch();
  if (sgs.devices.empty()) sgs.devices = {device};
  return core::traits(c.mode).dedicated_generator
             ? RolloutGenerator::dedicated(whole, ec, sgs, start_iteration)
             : RolloutGenerator::colocated(whole, ec, start_iteration);
}

}  // namespace streamrl::rl
