#include "pipeline_measured.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "bench_ranks.h"
#include "rounds.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/threads.h"
#include "streamrl/dist/pipeline_parallel.h"
#include "streamrl/pipeline/micro_batches.h"
#include "streamrl/planner/pipeline_cost_fit.h"
#include "streamrl/planner/pipeline_plan.h"
#include "streamrl/planner/pipeline_step_calibration.h"
#include "streamrl/tasks/split.h"
#include "streamrl/tasks/task.h"

namespace streamrl::bench {
namespace {

using json = nlohmann::json;
using torch::Tensor;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median_s(const std::vector<double>& v) { return spread_json(v)["median"].get<double>(); }

// The measured model: 8 layers of width 128 (the main job's tiny model, twice as deep), so each
// stage holds 4 and compute dominates Gloo's per-message latency.
model::ModelConfig measured_model() {
  model::ModelConfig c;
  c.vocab_size = 100;
  c.hidden_size = 128;
  c.intermediate_size = 384;
  c.num_hidden_layers = 8;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.max_position_embeddings = 2048;
  c.tie_word_embeddings = true;
  return c;
}

// Default-task problems (prompt + demonstration characters, one token each) times this factor:
// median ~90 tokens, longest ~1.1k.
constexpr int64_t kMeasuredLengthScale = 4;

// A micro-batch of random tokens, right-padded to its longest sequence.
dist::StageBatch make_batch(const std::vector<int64_t>& lengths, const std::vector<int>& samples,
                            int64_t vocab) {
  int64_t longest = 1;
  for (int i : samples) longest = std::max(longest, lengths[i]);
  const int64_t rows = static_cast<int64_t>(samples.size());
  Tensor tokens = torch::randint(3, vocab, {rows, longest}, torch::kLong);
  Tensor valid = torch::zeros({rows, longest}, torch::kBool);
  for (int64_t r = 0; r < rows; ++r) valid[r].narrow(0, 0, lengths[samples[r]]).fill_(true);
  return {tokens, valid};
}

// Forward and backward seconds of the whole model on [rows, len] batches, fitted per layer as
// c + a * tokens + b * tokens * len (least squares over the shapes), medians of 3.
planner::PipelineProfile measure_profile(model::CausalLM& lm) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{64, 16}, {32, 64}, {16, 128},
                                                           {8, 256}, {4, 512}, {2, 1024}};
  std::vector<double> fwd, bwd, x1, x2;
  for (auto [rows, len] : shapes) {
    std::vector<double> f, b;
    for (int rep = 0; rep < 4; ++rep) {
      const Tensor tokens = torch::randint(3, 100, {rows, len}, torch::kLong);
      const Tensor valid = torch::ones({rows, len}, torch::kBool);
      auto t = Clock::now();
      const Tensor loss = lm->score(tokens, valid).logprobs.sum();
      const double tf = since(t);
      t = Clock::now();
      loss.backward();
      const double tb = since(t);
      for (auto& p : lm->parameters()) p.mutable_grad() = Tensor();
      if (rep > 0) f.push_back(tf), b.push_back(tb);  // the first warms the allocator
    }
    fwd.push_back(median_s(f)), bwd.push_back(median_s(b));
    x1.push_back(static_cast<double>(rows * len));
    x2.push_back(static_cast<double>(rows * len * len));
  }
  const std::vector<double> f = planner::fit_relative_nonnegative(x1, x2, fwd);
  const std::vector<double> b = planner::fit_relative_nonnegative(x1, x2, bwd);
  const double layers = static_cast<double>(lm->config().num_hidden_layers);
  planner::PipelineLayerProfile layer;
  layer.set_terms(pipeline::OpKind::kForward, {f[0] / layers, f[1] / layers, f[2] / layers});
  layer.set_terms(pipeline::OpKind::kBackward, {b[0] / layers, b[1] / layers, b[2] / layers});
  layer.activation_bytes_per_token = 34.0 * static_cast<double>(lm->config().hidden_size) * 2;
  planner::PipelineProfile p;
  p.layers.assign(static_cast<size_t>(lm->config().num_hidden_layers), layer);
  p.boundary_bytes_per_token = 4.0 * static_cast<double>(lm->config().hidden_size);
  return p;
}

// Point-to-point latency and bandwidth between ranks 0 and 1: ping-pong medians at two sizes.
std::pair<double, double> measure_link(dist::ProcessGroup& world) {
  const auto one_way = [&](int64_t floats) {
    const Tensor t = torch::ones({floats});
    std::vector<double> v;
    for (int rep = 0; rep < 9; ++rep) {
      world.barrier();
      const auto start = Clock::now();
      if (world.rank() == 0) {
        world.send(t, 1, 1000 + rep);
        world.recv({floats}, torch::kFloat32, 1, 2000 + rep);
      } else {
        world.recv({floats}, torch::kFloat32, 0, 1000 + rep);
        world.send(t, 0, 2000 + rep);
      }
      world.wait_sends();
      v.push_back(since(start) / 2);
    }
    return median_s(v);
  };
  const double small = one_way(256), large = one_way(1 << 20);
  const double bytes = 4.0 * ((1 << 20) - 256);
  return {small, bytes / std::max(1e-9, large - small)};
}

}  // namespace

std::vector<int64_t> draw_task_lengths(uint64_t seed, int count, int64_t scale) {
  const tasks::Task& task = tasks::get_task(tasks::default_task_name());
  std::vector<int64_t> lengths;
  for (int i = 0; i < count; ++i) {
    const tasks::Problem p =
        tasks::draw_problem(task, seed, tasks::Split::kTrain, static_cast<uint64_t>(i));
    lengths.push_back(scale * static_cast<int64_t>(p.prompt.size() + p.demonstration.size()));
  }
  return lengths;
}

json run_pipeline_pp2_worker(const BenchOptions& options, const std::string& out_path) {
  core::apply_core_budget(1);  // one core per rank: ATen's pool and OpenBLAS's
  dist::ProcessGroup world(dist::process_group_options_from_env(std::chrono::seconds(120)));
  const int pp = world.world_size();
  const model::ModelConfig mc = measured_model();
  model::CausalLM lm(mc, /*seed=*/0);
  torch::manual_seed(17);

  // 1. Profile on both ranks at once (so each core sees the other busy, as in a step), averaged
  // over the ranks so both stages plan alike.
  world.barrier();
  planner::PipelineProfile profile = measure_profile(lm);
  {
    planner::PipelineLayerProfile& l = profile.layers[0];
    for (const pipeline::OpKind kind : {pipeline::OpKind::kForward, pipeline::OpKind::kBackward}) {
      std::array<double, 3> t = l.terms(kind);
      const std::vector<double> sums = world.all_reduce_sum({t.begin(), t.end()});
      for (size_t i = 0; i < t.size(); ++i) t[i] = sums[i] / pp;
      l.set_terms(kind, t);
    }
    profile.layers.assign(profile.layers.size(), l);
  }
  // Each rank times the link on its own clock: averaged too, or the ranks' plans could differ.
  const auto [latency, bandwidth] = measure_link(world);
  const std::vector<double> link = world.all_reduce_sum({latency, bandwidth});
  profile.link_latency_s = link[0] / pp, profile.link_bytes_per_s = link[1] / pp;

  const pipeline::Partition partition =
      pipeline::partition_layers(std::vector<double>(mc.num_hidden_layers, 1.0), pp, 1);
  dist::PipelineStage stage(lm, world, pp, partition);
  planner::PipelineEmulator emulator;
  // The microbenchmark profile plans and emulates round 0; from round 1 on, the profile refitted
  // to the ops every earlier round ran (as the trainer refits after each step), which sees what
  // the microbenchmark cannot: both stage processes competing for the cores, the loss on the last
  // stage. Each round is predicted from rounds before it, never fitted to its own ops.
  const planner::PipelineProfile microbenchmark = profile;
  planner::PipelineCostFit fit(partition);
  // Stages sharing this host's cores and memory slow each other while both compute, so the
  // fitted op costs under-predict schedules with few bubbles and over-predict those with many;
  // the calibration learns that from the steps (planner::PipelineStepCalibration).
  planner::PipelineStepCalibration calibration;

  const int rounds_n = options.quick ? 3 : 8, problems = options.quick ? 16 : 48;
  // The static baseline's fixed count, tuned to this workload: 8P micro-batches (6 sequences
  // each at PP = 2). The emulated half's 2P made micro-batches of 24 sequences padded to the
  // longest here, 10-30x slower than any split below: too weak a baseline to be worth quoting.
  const int static_count = 8 * pp;
  Rounds rounds("pipeline", pp);
  std::map<std::string, int> splits, orders;
  for (int r = 0; r < rounds_n; ++r) {
    rounds.begin_round(r);
    const bool fitted = r > 0;
    const pipeline::TokenCost token_cost = profile.token_cost();
    planner::PipelineCostFit round_ops(partition);
    std::vector<std::pair<planner::PipelineEmulation, double>> round_steps;  // fitted rounds
    const auto run_variant = [&](const std::string& name, const std::vector<int64_t>& lengths,
                                 const std::vector<pipeline::MicroBatch>& mbs,
                                 const pipeline::Schedule& schedule) {
      const auto emulated = [&](const planner::PipelineProfile& p) {
        return emulator.run(schedule, planner::pipeline_op_costs(p, partition, mbs));
      };
      std::vector<dist::StageBatch> batches;
      for (const auto& mb : mbs) batches.push_back(make_batch(lengths, mb.samples, mc.vocab_size));
      world.barrier();  // both stages start together
      const auto start = Clock::now();
      const dist::PipelineRunStats s = stage.run(
          schedule, batches,
          [](int, const model::ScoreOutput& out) { return -out.logprobs.sum() / 1000.0; });
      world.barrier();
      const double step = since(start);
      for (auto& p : lm->parameters()) p.mutable_grad() = Tensor();  // no update: same work
      round_ops.add(s.ops, mbs);
      // Every stage's op seconds into one table (each stage fills its own), with the compute
      // and wait sums: one collective.
      pipeline::OpCosts measured = planner::pipeline_op_costs(profile, partition, mbs);
      const pipeline::OpCosts predicted = measured;
      const size_t n = measured.forward_s.size();
      std::vector<double> sums(2 + 2 * n, 0.0);
      sums[0] = s.compute_s, sums[1] = s.wait_s;
      for (const pipeline::OpSeconds& o : s.ops) {
        const size_t i = static_cast<size_t>(measured.index(o.stage, o.op.chunk, o.op.micro_batch));
        sums[2 + (o.op.kind == pipeline::OpKind::kForward ? 0 : n) + i] = o.seconds;
      }
      sums = world.all_reduce_sum(sums);
      measured.forward_s.assign(sums.begin() + 2, sums.begin() + 2 + n);
      measured.backward_s.assign(sums.begin() + 2 + n, sums.end());
      // The emulator alone: this step's schedule on the op seconds it measured. What it misses
      // is outside the ops (the receives' copies, the executor's bookkeeping).
      const double replay = emulator.run(schedule, measured).step_s;
      rounds.add(name + "_emulator_error_measured_ops", std::abs(replay - step) / step);
      rounds.add(name + "_step_s", step);
      const double micro = emulated(microbenchmark).step_s;
      rounds.add(name + "_emulator_error_microbenchmark", std::abs(micro - step) / step);
      if (fitted) {
        const planner::PipelineEmulation emulation = emulated(profile);
        const double e = emulation.step_s;
        rounds.add(name + "_emulated_step_s", e);
        rounds.add(name + "_emulator_error_uncalibrated", std::abs(e - step) / step);
        // Calibrated by the steps of earlier fitted rounds (none before round 2).
        if (calibration.observations() > 0) {
          const double c = calibration.step_s(emulation);
          rounds.add(name + "_calibrated_step_s", c);
          rounds.add(name + "_emulator_error", std::abs(c - step) / step);
        }
        round_steps.emplace_back(emulation, step);
        // The profile's part: its op seconds against the measured, signed.
        double predicted_s = 0, measured_s = 0;
        for (size_t i = 0; i < n; ++i) {
          predicted_s += predicted.forward_s[i] + predicted.backward_s[i];
          measured_s += measured.forward_s[i] + measured.backward_s[i];
        }
        rounds.add(name + "_op_seconds_error", predicted_s / measured_s - 1);
      }
      rounds.add(name + "_bubble_ratio", 1.0 - sums[0] / (pp * step));
      rounds.add(name + "_micro_batches", static_cast<double>(mbs.size()));
    };
    const std::vector<int64_t> lengths =
        draw_task_lengths(2000 + static_cast<uint64_t>(r), problems, kMeasuredLengthScale);
    int64_t total = 0;
    for (int64_t l : lengths) total += l;
    // Static: M micro-batches of equal sample count, grouped by length (in arrival order the
    // padding alone made it 10-30x slower here), 1F1B.
    const std::vector<pipeline::MicroBatch> fixed =
        pipeline::split_static_grouped(lengths, static_count, token_cost);
    const pipeline::Schedule one_f = pipeline::one_f_one_b(pp, static_cast<int>(fixed.size()));
    // Dynamic: the plan, on a candidate cap (both ranks must agree), timed.
    planner::PipelinePlanOptions o;
    o.token_cost = token_cost;
    o.padded = true;
    o.target_tokens = (total + static_count - 1) / static_count;
    o.static_micro_batches = static_count;
    o.time_budget_s = std::numeric_limits<double>::infinity();
    o.max_candidates_per_split = 8;
    const auto t0 = Clock::now();
    const planner::PipelinePlan plan =
        planner::plan_pipeline(lengths, profile, partition, o, emulator);
    rounds.add("planner_s", since(t0));
    ++splits[plan.split], ++orders[plan.candidate];
    // The plan's micro-batches in the static 1F1B order: what the split alone gains.
    const pipeline::Schedule split_only =
        pipeline::one_f_one_b(pp, static_cast<int>(plan.micro_batches.size()));
    // Interleaved, rotating which goes first.
    for (int k = 0; k < 3; ++k) {
      switch ((k + r) % 3) {
        case 0:
          run_variant("static", lengths, fixed, one_f);
          break;
        case 1:
          run_variant("split_only", lengths, plan.micro_batches, split_only);
          break;
        default:
          run_variant("dynamic", lengths, plan.micro_batches, plan.schedule);
      }
    }
    rounds.add("planner_share_of_step",
               rounds.values("planner_s").back() / rounds.values("dynamic_step_s").back());
    // Every stage's ops of this round into the fit (the same sums on both ranks).
    fit.decay(planner::PipelineCostFit::kKeepPerStep);
    fit.merge(world.all_reduce_sum(round_ops.sums()));
    profile = fit.apply(microbenchmark);
    // The calibration learns how the steps ran against their emulation from this profile;
    // round 0's microbenchmark emulation says nothing about the fitted profile's.
    if (!round_steps.empty()) calibration.decay(planner::PipelineCostFit::kKeepPerStep);
    for (const auto& [emulation, step] : round_steps) calibration.add(emulation, step);
  }
  json out = rounds.to_json();
  out["load"] = rounds.load_json();
  out["stages"] = pp;
  out["static_micro_batches"] = static_count;
  out["static_split"] = "equal sample counts over the sequences sorted by length (group_by_length)";
  out["model"] = {{"layers", mc.num_hidden_layers},
                  {"hidden", mc.hidden_size},
                  {"note", "one core per stage; micro-batches padded to their longest sequence"}};
  out["workload"] = {{"problems_per_batch", problems},
                     {"length", "4 x (prompt + demonstration characters) of the default task"}};
  const auto layer_json = [](const planner::PipelineLayerProfile& l) {
    return json{{"forward_s_per_op", l.forward_per_op_s},
                {"forward_s_per_token", l.forward_per_token_s},
                {"forward_s_per_token_sq", l.forward_per_token_sq_s},
                {"backward_s_per_op", l.backward_per_op_s},
                {"backward_s_per_token", l.backward_per_token_s},
                {"backward_s_per_token_sq", l.backward_per_token_sq_s}};
  };
  json fitted_layers = json::array();
  for (int v = 0; v < pp; ++v)
    fitted_layers.push_back(layer_json(profile.layers[partition.boundaries[v]]));
  out["profile"] = {{"microbenchmark_per_layer", layer_json(microbenchmark.layers[0])},
                    {"fitted_per_layer_of_stage", fitted_layers},
                    {"link_latency_s", latency},
                    {"link_gb_s", bandwidth / 1e9}};
  out["splits_chosen"] = splits;
  out["orders_chosen"] = orders;
  out["dynamic_speedup"] = rounds.ratio("static_step_s", "dynamic_step_s");
  // The speed-up in two parts: the token-cost split (in 1F1B order), then the searched order.
  out["split_speedup"] = rounds.ratio("static_step_s", "split_only_step_s");
  out["order_speedup"] = rounds.ratio("split_only_step_s", "dynamic_step_s");
  // Headline: each round predicted by the profile fitted to the rounds before it and the step
  // calibration learnt from them (rounds 0 and 1 have none). Beside it, the profile alone, and
  // the same rounds emulated from the microbenchmark profile.
  out["emulator_relative_error"] = {{"static", rounds.summary("static_emulator_error")},
                                    {"split_only", rounds.summary("split_only_emulator_error")},
                                    {"dynamic", rounds.summary("dynamic_emulator_error")}};
  out["emulator_relative_error_uncalibrated"] = {
      {"static", rounds.summary("static_emulator_error_uncalibrated")},
      {"split_only", rounds.summary("split_only_emulator_error_uncalibrated")},
      {"dynamic", rounds.summary("dynamic_emulator_error_uncalibrated")}};
  out["emulator_relative_error_measured_ops"] = {
      {"static", rounds.summary("static_emulator_error_measured_ops")},
      {"split_only", rounds.summary("split_only_emulator_error_measured_ops")},
      {"dynamic", rounds.summary("dynamic_emulator_error_measured_ops")}};
  out["op_seconds_relative_error"] = {{"static", rounds.summary("static_op_seconds_error")},
                                      {"split_only", rounds.summary("split_only_op_seconds_error")},
                                      {"dynamic", rounds.summary("dynamic_op_seconds_error")}};
  out["emulator_error_note"] =
      "emulator_relative_error: each round predicted by the profile fitted to the rounds before "
      "it and the step calibration (measured / emulated as a line in the emulated busy share) "
      "learnt from them; emulator_relative_error_uncalibrated: the fitted profile alone "
      "(emulator and profile together); emulator_relative_error_measured_ops: each step's "
      "schedule emulated on the op seconds that step measured (the emulator alone); "
      "op_seconds_relative_error: the fitted profile's op seconds against the measured, signed "
      "(load drifting between rounds moves it both ways)";
  out["emulator_relative_error_microbenchmark"] = {
      {"static", rounds.summary("static_emulator_error_microbenchmark")},
      {"split_only", rounds.summary("split_only_emulator_error_microbenchmark")},
      {"dynamic", rounds.summary("dynamic_emulator_error_microbenchmark")}};
  out["emulator_profile"] =
      "fitted after each round to every earlier round's measured ops (planner::PipelineCostFit)";
  return finish_bench_rank(world, out, out_path, "pipeline");
}

json measure_pipeline_pp2(const BenchOptions& options) {
  return launch_bench_ranks("pipeline", 2, kPipelineWorkerEnv, options);  // one stage per core
}

}  // namespace streamrl::bench
