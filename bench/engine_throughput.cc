#include "engine_throughput.h"

#include <chrono>

#include "flops.h"
#include "rounds.h"
#include "streamrl/core/roofline.h"
#include "streamrl/core/threads.h"
#include "streamrl/engine/engine.h"
#include "streamrl/engine/profile.h"
#include "streamrl/model/fused_linear.h"
#include "streamrl/tasks/length_stats.h"
#include "streamrl/tasks/split.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The workload: one request per problem, exactly as long as its demonstration (+ EOS). Lengths are
// forced (no stop token) so both schedules generate the same tokens whatever the weights.
std::vector<engine::Request> workload(int count, const tokenizer::Tokenizer& tok,
                                      std::vector<double>* lengths) {
  const tasks::Task& task = tasks::get_task(tasks::default_task_name());
  std::vector<engine::Request> out;
  for (int i = 0; i < count; ++i) {
    tasks::Problem p = tasks::draw_problem(task, 7, tasks::Split::kTrain, i);
    engine::Request r;
    r.request_id = i;
    r.prompt_ids = {tok.bos_id()};
    for (int32_t t : tok.encode(p.prompt)) r.prompt_ids.push_back(t);
    r.params.max_new_tokens = static_cast<int>(tok.encode(p.demonstration).size()) + 1;
    r.params.seed = 1;
    r.length_estimate = r.params.max_new_tokens;  // oracle, used only by the LPT variant
    lengths->push_back(r.params.max_new_tokens);
    out.push_back(std::move(r));
  }
  return out;
}

double run_schedule(engine::Engine& engine, const std::vector<engine::Request>& requests, int batch,
                    bool continuous, int64_t* tokens, int64_t* steps) {
  const int64_t steps0 = engine.stats().steps;
  auto t0 = Clock::now();
  for (size_t start = 0; start < requests.size();) {
    const size_t end = continuous ? requests.size() : std::min(requests.size(), start + batch);
    for (size_t i = start; i < end; ++i) {
      engine::Request r = requests[i];
      r.on_sample = [tokens](engine::Sample&& s) { *tokens += s.output_ids.size(); };
      engine.add_request(std::move(r));
    }
    engine.run_until_idle();
    start = end;
  }
  *steps = engine.stats().steps - steps0;
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

nlohmann::json run_engine_throughput(const BenchOptions& options) {
  const int threads = options.threads > 0 ? options.threads : 1;
  core::apply_core_budget(threads);
  core::Roofline roof = core::measure_roofline();
  const std::string config_path = std::string(STREAMRL_SOURCE_DIR) + "/configs/model/tiny.json";
  model::CausalLM lm(model::load_model_config(config_path), 0);
  auto tok = tokenizer::make_tokenizer("char");
  const int count = options.quick ? 128 : 1024;
  const int batch = options.quick ? 16 : 64;
  std::vector<double> lengths;
  auto requests = workload(count, *tok, &lengths);

  engine::EngineConfig ec;
  ec.max_batch_size = batch;
  ec.max_seq_len = 512;
  engine::Engine eng(lm, ec);
  ec.admission = engine::AdmissionPolicy::kLongestFirst;
  engine::Engine lpt(lm, ec);
  int64_t static_tokens = 0, cont_tokens = 0, lpt_tokens = 0;
  int64_t static_steps = 0, cont_steps = 0, lpt_steps = 0;
  // The schedules alternate over rounds (the machine is shared and its load drifts); each ratio is
  // the median of its per-round ratios.
  Rounds log("engine", threads);
  const bool packing = model::FusedLinear::packs_weights();
  const int rounds = options.quick ? 1 : 5;
  for (int r = 0; r < rounds; ++r) {
    log.begin_round(r);
    static_tokens = cont_tokens = lpt_tokens = 0;
    log.add("static_s", run_schedule(eng, requests, batch, false, &static_tokens, &static_steps));
    log.add("continuous_s", run_schedule(eng, requests, batch, true, &cont_tokens, &cont_steps));
    log.add("continuous_lpt_s", run_schedule(lpt, requests, batch, true, &lpt_tokens, &lpt_steps));
    if (packing) {  // the same continuous schedule on OpenBLAS's unpacked GEMMs
      model::FusedLinear::set_packing(false);
      int64_t t = 0, s = 0;
      log.add("continuous_unpacked_s", run_schedule(eng, requests, batch, true, &t, &s));
      model::FusedLinear::set_packing(true);
    }
  }
  const double static_s = log.median("static_s"), cont_s = log.median("continuous_s"),
               lpt_s = log.median("continuous_lpt_s");
  // Why the ratio is what it is: both schedules compute the same rows (same tokens, same contexts),
  // so their difference is the per-step cost times the difference in steps. Solved for that cost,
  // the rest is row work both pay alike; the ratio could reach the step ratio only if rows were
  // free, and falls toward 1 as they dominate.
  const double step_s = (static_s - cont_s) / static_cast<double>(static_steps - cont_steps);
  const double row_work_s = static_s - step_s * static_steps;

  engine::ProfileConfig pc;
  pc.batch_sizes = {64};
  pc.contexts = {64};
  engine::Profile prof = engine::measure_profile(lm, pc);
  const double bs64_tps = prof.ptl.front().tokens_per_s();
  const auto& mc = lm->config();
  const double flops = forward_flops_per_token(mc) + attention_flops(mc, 64);
  tasks::LengthSummary ls = tasks::summarize(lengths);

  return {
      {"samples", count},
      {"max_batch_size", batch},
      {"threads", threads},
      {"output_length", {{"p50", ls.p50}, {"p90", ls.p90}, {"p99", ls.p99}, {"max", ls.max}}},
      {"static_seconds", static_s},
      {"steps",
       {{"static", static_steps}, {"continuous", cont_steps}, {"continuous_lpt", lpt_steps}}},
      {"continuous_seconds", cont_s},
      {"static_tokens_per_s", static_tokens / static_s},
      {"continuous_tokens_per_s", cont_tokens / cont_s},
      {"continuous_over_static", log.ratio_median("static_s", "continuous_s")},
      {"continuous_over_static_rounds", log.ratio("static_s", "continuous_s")},
      {"decomposition",
       {{"per_step_ms", step_s * 1e3},
        {"row_work_s", row_work_s},
        {"row_work_share_of_continuous", row_work_s / cont_s},
        {"step_ratio", static_cast<double>(static_steps) / cont_steps},
        {"note",
         "static and continuous run the same rows; per_step_ms solves their difference over "
         "their step counts, row_work_s is the rest (paid alike); continuous_over_static = "
         "(static steps x per_step + row work) / (continuous steps x per_step + row work), "
         "at most step_ratio"}}},
      {"continuous_lpt_seconds", lpt_s},
      {"continuous_lpt_over_static", log.ratio_median("static_s", "continuous_lpt_s")},
      {"continuous_lpt_over_static_rounds", log.ratio("static_s", "continuous_lpt_s")},
      {"packed_gemm_speedup",
       packing ? log.ratio("continuous_unpacked_s", "continuous_s") : nlohmann::json()},
      {"seconds_rounds", log.to_json()},
      {"load", log.load_json()},
      {"goal_continuous_over_static", 1.8},
      {"decode_bs64_tokens_per_s", bs64_tps},
      {"gemm_gflops", roof.gemm_gflops},
      {"decode_bs64_roofline_fraction", bs64_tps * flops / (roof.gemm_gflops * 1e9)},
  };
}

}  // namespace streamrl::bench
