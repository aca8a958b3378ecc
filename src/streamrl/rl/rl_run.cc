#include "streamrl/rl/rl_run.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "streamrl/core/clock.h"
#include "streamrl/core/fs.h"
#include "streamrl/core/log.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/rl/collapse_watch.h"
#include "streamrl/rl/iteration_record.h"
#include "streamrl/rl/rl_loop.h"
#include "streamrl/rl/rl_roles.h"
#include "streamrl/rl/train_checkpoint.h"
#include "streamrl/telemetry/metrics_log.h"
#include "streamrl/telemetry/progress.h"
#include "streamrl/telemetry/report.h"

namespace streamrl::rl {
namespace fs = std::filesystem;
namespace {

using core::Clock;
// What a run writes besides checkpoints: metrics.jsonl (and TensorBoard files), samples.jsonl,
// and the trace. Rank 0 alone writes the run directory; it merges the other ranks' traces at the
// end.
struct RunOutputs {
  std::optional<telemetry::MetricsLog> metrics, sample_log;
  telemetry::Trace trace_store;
  telemetry::Trace* trace = nullptr;
  fs::path trace_file;

  RunOutputs(const RlRunConfig& c, const RlRoles& roles, const std::string& config_yaml) {
    const fs::path run_dir = c.run.dir();
    const int rank = roles.rank;
    if (roles.lead) {
      core::write_file_atomic(run_dir / "config.yaml", config_yaml);
      metrics.emplace(run_dir / "metrics.jsonl", roles.start_iteration, c.tensorboard);
      if (c.sample_log) sample_log.emplace(run_dir / "samples.jsonl", roles.start_iteration);
    }
    trace_file = run_dir / "trace.json";  // rank 0's; the others send theirs to it
    if (!c.trace) return;
    trace = &trace_store;
    const std::string of_rank = roles.group ? " rank " + std::to_string(rank) : "";
    trace->name_track(trainer_track(rank),
                      "trainer" + of_rank + " (" + core::mode_name(c.mode) + ")");
    const int instances = !roles.sgs_urls.empty() ? static_cast<int>(roles.sgs_urls.size())
                          : core::traits(c.mode).dedicated_generator ? c.sgs.instances
                                                                     : 1;
    for (int i = 0; i < instances; ++i) {
      trace->name_track(generator_track(rank) + i,
                        "SGS instance " + std::to_string(i) +
                            (roles.group ? " (rank " + std::to_string(rank) + ")" : ""));
    }
  }

  // Rank 0 merges the other ranks' traces, sent through the process group: another rank may run
  // on another host, with a run directory of its own.
  void merge_rank_traces(const RlRoles& roles) {
    if (!roles.group || !trace) return;
    const auto all = roles.group->all_gather_bytes(roles.lead ? "" : trace->to_json().dump());
    if (!roles.lead) return;
    for (size_t r = 1; r < all.size(); ++r) {
      auto j = nlohmann::json::parse(all[r], nullptr, /*allow_exceptions=*/false);
      trace->merge(std::move(j));
    }
  }
};

// Rank 0 writes the checkpoint. Under expert parallelism every rank calls this: the ranks of the
// first replica (whose states the other replicas equal) gather their optimizer states for rank 0
// to write one file per expert rank beside the whole model.
void save_checkpoint(const RlRunConfig& c, RlRoles& roles, int64_t step, nlohmann::json state) {
  if (!roles.experts) {
    save_training_checkpoint(c.run.dir(), step, roles.policy, roles.tokenizer->to_json(),
                             *roles.optimizer, state, c.checkpoint.keep, roles.sparse.get());
    return;
  }
  if (roles.experts->layout().dp_rank() != 0) return;
  const std::vector<std::string> states =
      roles.experts->experts()->group().all_gather_bytes(optimizer_bytes(*roles.optimizer));
  if (!roles.lead) return;
  const std::vector<std::string> names = ep_optimizer_files(c.parallel.ep);
  std::map<std::string, std::string> files;
  for (size_t e = 0; e < names.size(); ++e) files[names[e]] = states[e];
  state["parallel_ep"] = c.parallel.ep;
  save_training_checkpoint(c.run.dir(), step, roles.whole, roles.tokenizer->to_json(), files, state,
                           c.checkpoint.keep);
}

}  // namespace

nlohmann::json run_rl(const RlRunConfig& c, const std::string& resolved_config_yaml) {
  const auto run_start = Clock::now();
  RlRoles roles = RlRoles::set_up(c);
  RunOutputs out(c, roles, resolved_config_yaml);
  const fs::path run_dir = c.run.dir();
  const int64_t start_iter = roles.start_iteration;

  // The sampled pass (eval.samples) runs before and after training only: it costs `samples`
  // times the greedy pass.
  auto evaluate_now = [&](bool sampled) {
    torch::NoGradGuard no_grad;
    telemetry::ScopedSpan span(out.trace, trainer_track(roles.rank), "held-out eval");
    EvalConfig ec = c.eval;
    if (!sampled) ec.samples = 0;
    return evaluate(roles.whole, *roles.prompts, *roles.task, ec);
  };
  nlohmann::json before;
  CollapseWatch collapse;  // over this process's iterations (a resumed run starts afresh)
  if (start_iter == 0 && c.eval.n > 0 && roles.lead) {
    EvalResult e = evaluate_now(true);
    before = e.to_json();
    collapse.observe_eval(e.accuracy);
    out.metrics->write({{"step", 0}, {"eval", before}});
    SLOG(kInfo) << "held-out accuracy before RL: " << e.accuracy;
  }

  std::unique_ptr<PipelineTrainer> pipe;
  if (c.parallel.pp > 1) {
    if (!roles.group) {
      throw InputError("parallel.pp = " + std::to_string(c.parallel.pp) +
                       " needs its ranks: run under streamrl launch --nproc (a multiple of pp)");
    }
    pipe = std::make_unique<PipelineTrainer>(roles.policy, *roles.group, c.parallel,
                                             c.update.micro_batch_tokens,
                                             flops_profile(roles.policy->config()));
  }
  auto new_step = [&]() -> std::unique_ptr<TrainerStep> {
    auto step = std::make_unique<PolicyStep>(roles.policy, *roles.optimizer, c.loss, c.update);
    step->set_trace(out.trace, trainer_track(roles.rank));
    step->set_process_group(roles.group.get());
    if (pipe) step->set_pipeline(pipe.get(), roles.group.get());
    if (roles.experts) step->set_expert_parallel(roles.experts.get(), roles.whole);
    step->set_moe(c.moe);
    step->set_sparse_attention(roles.sparse.get());
    return step;
  };
  RlLoop loop(c, *roles.task, *roles.prompts, roles.whole, roles.reference, new_step, out.trace,
              roles.group.get());
  loop.restore_curriculum(roles.curriculum_state);
  loop.start(roles.make_generator(c, out.trace), start_iter);

  auto checkpoint_state = [&](int64_t step) {
    nlohmann::json state = {{"step", step}, {"kind", "rl"}};
    if (c.data.curriculum.enabled) state["curriculum"] = loop.curriculum_state();
    if (roles.sparse) state["sparse_attention"] = roles.sparse->state();
    return state;
  };
  telemetry::Progress progress("rl " + c.run.name, c.iterations);
  for (int64_t it = start_iter; it < c.iterations; ++it) {
    const auto iter_start = Clock::now();
    IterationStats st;
    const double collectives_before = roles.group ? roles.group->collective_seconds() : 0;
    const UpdateResult up = loop.run_iteration(it, &st);
    const int64_t done = it + 1;
    const bool checkpoint_now =
        c.checkpoint.every > 0 && done % c.checkpoint.every == 0 && done < c.iterations;
    if (roles.group && (checkpoint_now || done == c.iterations)) {
      // Inside the iteration's time and collectives: a link that drops during this check stalls
      // the run here, and the metrics must say so.
      dist::check_same_on_every_rank(*roles.group, roles.whole->parameters(),
                                     "policy weights after iteration " + std::to_string(done));
    }
    const SampleTotals totals = sample_totals(st, roles.group.get());  // also a collective
    if (roles.group) st.collectives_s = roles.group->collective_seconds() - collectives_before;
    const double iter_s = core::seconds_since(iter_start);
    IterationRecord r = iteration_record(c, it, st, totals, up, loop, iter_s, roles.group.get());
    if (!roles.lead) {
      if (checkpoint_now && roles.experts) save_checkpoint(c, roles, done, checkpoint_state(done));
      continue;
    }
    collapse.observe_iteration(r.reward_mean, r.mean_length);
    if (c.eval_every > 0 && done % c.eval_every == 0 && done < c.iterations && c.eval.n > 0) {
      const EvalResult e = evaluate_now(false);
      collapse.observe_eval(e.accuracy);
      r.json["eval"] = e.to_json();
    }
    if (auto warning = collapse.check()) {
      SLOG(kWarn) << *warning;
      r.json["collapse_warning"] = *warning;
    }
    out.metrics->write(r.json);
    if (out.sample_log) {
      out.sample_log->write(sample_record(done, st));
    }
    char status[96];
    std::snprintf(status, sizeof(status), "reward %.3f len %.0f kl %.4f %.1fs/it", r.reward_mean,
                  r.mean_length, up.metrics.kl_mean(), iter_s);
    progress.update(done, status);
    if (checkpoint_now) {
      save_checkpoint(c, roles, done, checkpoint_state(done));
      if (out.trace) out.trace->flush(out.trace_file);
    }
  }
  progress.finish();
  out.merge_rank_traces(roles);
  if (!roles.lead) {
    if (roles.experts) save_checkpoint(c, roles, c.iterations, checkpoint_state(c.iterations));
    return {{"rank", roles.rank},
            {"iterations", c.iterations},
            {"minutes", core::seconds_since(run_start) / 60.0}};
  }

  // The final checkpoint and held-out evaluation.
  save_checkpoint(c, roles, c.iterations, checkpoint_state(c.iterations));
  model::save_checkpoint(run_dir / "final", roles.whole, roles.tokenizer->to_json(),
                         model::checkpoint_side_files(c.init_from));
  nlohmann::json result = {{"run_dir", run_dir.string()},
                           {"mode", core::mode_name(c.mode)},
                           {"checkpoint", (run_dir / "final").string()},
                           {"iterations", c.iterations},
                           {"resumed_from_iteration", start_iter}};
  if (c.eval.n > 0) {
    EvalResult after = evaluate_now(true);
    collapse.observe_eval(after.accuracy);
    nlohmann::json rec = {{"step", c.iterations}, {"final_eval", after.to_json()}};
    if (auto warning = collapse.check()) {
      SLOG(kWarn) << *warning;
      rec["collapse_warning"] = *warning;
    }
    out.metrics->write(rec);
    result["eval_after"] = after.to_json();
    result["accuracy_after"] = after.accuracy;
    if (!before.is_null()) {
      result["eval_before"] = before;
      result["accuracy_before"] = before["accuracy"];
      for (const auto& line : describe_change(before, after.to_json())) SLOG(kInfo) << line;
    }
  }
  result["warnings"] = collapse.warnings();
  if (out.trace) {
    out.trace->flush(out.trace_file);
    result["trace"] = out.trace_file.string();
  }
  result["report"] = telemetry::write_report(run_dir).string();
  result["minutes"] = core::seconds_since(run_start) / 60.0;
  return result;
}

}  // namespace streamrl::rl
