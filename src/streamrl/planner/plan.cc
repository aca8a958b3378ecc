#include "streamrl/planner/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/planner/allocation.h"
#include "streamrl/planner/cost_model.h"
#include "streamrl/planner/paper_refs.h"

namespace streamrl::planner {
namespace {

using nlohmann::json;

// Everything one (model, accelerator, workload) point needs to cost a stage on some devices.
class Scenario {
 public:
  Scenario(const PlanConfig& c, int max_output, int batches) : c_(c), max_output_(max_output) {
    const auto dist = LengthDistribution::codemath(max_output);
    for (int k = 0; k < batches; ++k) batches_.push_back(draw_batch(dist, c.batch, c.seed + k));
    mean_output_ = dist.mean();
  }

  const std::vector<Batch>& batches() const { return batches_; }
  double mean_output() const { return mean_output_; }
  int max_output() const { return max_output_; }

  int tp(const Accelerator& acc) const {
    return c_.measured.enabled ? 1 : choose_tp(acc, c_.shape);
  }

  std::vector<InstanceModel> instances(const Accelerator& acc, int devices) const {
    if (c_.measured.enabled) {
      return std::vector<InstanceModel>(
          devices, measured_instance(c_.measured.table, c_.measured.max_batch));
    }
    const int t = tp(acc);
    if (devices < t) {
      throw InputError(std::to_string(devices) + " " + acc.name + " cannot hold " + c_.shape.name +
                       " (tensor parallelism " + std::to_string(t) + ")");
    }
    const double seq = c_.batch.prompt_mean + mean_output_;
    return std::vector<InstanceModel>(devices / t,
                                      roofline_instance(acc, c_.shape, t, c_.efficiency, seq));
  }

  TrainerModel trainer(const Accelerator& acc, int devices) const {
    if (c_.measured.enabled) {
      const auto& m = c_.measured;
      TrainerModel t;
      t.devices = devices;
      t.tokens_per_s = m.train_tokens_per_s * std::pow(devices, m.train_scaling);
      t.step_overhead_s = m.optimizer_step_s;
      t.micro_batch_tokens = m.micro_batch_tokens;
      return t;
    }
    return roofline_trainer(acc, c_.shape, devices, c_.efficiency, c_.flops_per_param_token,
                            c_.batch.prompt_mean + mean_output_ / 2);
  }

  // P_gen: mean emulated generation time of the batches (`oracle`: estimates = true lengths).
  double p_gen(const Accelerator& acc, int devices, Dispatch d, bool oracle = false) const {
    const auto inst = instances(acc, devices);
    double t = 0;
    for (size_t k = 0; k < batches_.size(); ++k) {
      Batch b = batches_[k];
      if (oracle) {
        for (int g = 0; g < b.groups(); ++g) {
          double sum = 0;
          for (int i = 0; i < b.group_size; ++i) sum += b.output_tokens[g * b.group_size + i];
          b.estimate[g] = sum / b.group_size;
        }
      }
      t += simulate_generation(inst, b, d, 0, c_.long_tail_fraction, c_.seed + k).end;
    }
    return t / batches_.size();
  }

  // P_train: mean time to train one batch.
  double p_train(const Accelerator& acc, int devices) const {
    const TrainerModel tr = trainer(acc, devices);
    double t = 0;
    for (const auto& b : batches_) {
      t += tr.seconds(b.total_tokens(), b.samples()) + tr.step_overhead_s;
    }
    return t / batches_.size();
  }

  EmulatorResult run(Mode mode, Dispatch d, const Accelerator& gen_acc, int gen_devices,
                     const Accelerator& train_acc, int train_devices, double link_gb_s,
                     bool trace) const {
    EmulatorInput in;
    in.mode = mode;
    in.dispatch = d;
    in.instances = instances(gen_acc, gen_devices);
    in.trainer = trainer(train_acc, train_devices);
    in.weight_update_s =
        weight_transfer_seconds(c_.shape, c_.measured.enabled ? c_.measured.copy_gb_s : link_gb_s);
    in.batches = batches_;
    in.long_tail_fraction = c_.long_tail_fraction;
    in.seed = c_.seed;
    in.trace = trace;
    return emulate(in);
  }

 private:
  const PlanConfig& c_;
  int max_output_;
  std::vector<Batch> batches_;
  double mean_output_ = 0;
};

// Throughput in the steady state (pipeline fill excluded), which is what the paper's bars show.
double throughput(const EmulatorResult& r, const Batch& b) {
  return b.samples() / r.steady_iteration_seconds;
}

json mode_json(const EmulatorResult& r, const Batch& b, int gen, int train, Dispatch d) {
  json j = r.to_json();
  j["samples_per_s_steady"] = throughput(r, b);
  j["gen_devices"] = gen;
  j["train_devices"] = train;
  j["dispatch"] = dispatch_name(d);
  return j;
}

json allocation_json(const Allocation& a) {
  return {{"gen", a.gen}, {"train", a.train}, {"t_gen", a.t_gen}, {"t_train", a.t_train}};
}

// Weight push inside one datacenter: a node's worth of NICs (broadcast trees from several ranks).
double intra_dc_gb_s(const Accelerator& acc) { return 8 * acc.network_gb_s; }

json plan_scenario(const PlanConfig& c, int max_output, bool first) {
  const Scenario s(c, max_output, c.iterations);
  const Accelerator& acc = c.accelerator;
  const int gen_unit = std::max(c.unit, s.tp(acc));
  const Dispatch sd = c.streamrl_dispatch, bd = c.baseline_dispatch;
  const Allocation alloc = allocate_single(
      c.devices, gen_unit, c.unit, [&](int x) { return s.p_gen(acc, x, sd); },
      [&](int y) { return s.p_train(acc, y); });
  json out = {{"max_output", max_output},
              {"mean_output", s.mean_output()},
              {"tp", s.tp(acc)},
              {"ranker_recall_top20", top_recall(s.batches().front(), 0.2)},
              {"allocation", allocation_json(alloc)}};
  const double bw = intra_dc_gb_s(acc);
  json modes;
  std::map<Mode, double> thr;
  for (Mode m : {Mode::kColocate, Mode::kDisagg, Mode::kStream, Mode::kAsync}) {
    const bool coloc = m == Mode::kColocate;
    const Dispatch d = (coloc || m == Mode::kDisagg) ? bd : sd;
    const int gen = coloc ? c.devices : alloc.gen, train = coloc ? c.devices : alloc.train;
    const bool trace = first && !c.trace_path.empty() && m == c.trace_mode;
    EmulatorResult r = s.run(m, d, acc, gen, acc, train, bw, trace);
    if (trace) core::write_file_atomic(c.trace_path, r.trace.to_json().dump() + "\n");
    thr[m] = throughput(r, s.batches().front());
    modes[mode_name(m)] = mode_json(r, s.batches().front(), gen, train, d);
  }
  out["modes"] = modes;
  out["ratios"] = {{"stream_over_colocate", thr[Mode::kStream] / thr[Mode::kColocate]},
                   {"async_over_colocate", thr[Mode::kAsync] / thr[Mode::kColocate]},
                   {"async_over_stream", thr[Mode::kAsync] / thr[Mode::kStream]},
                   {"disagg_over_colocate", thr[Mode::kDisagg] / thr[Mode::kColocate]}};
  if (auto p = find_fig8(c.shape.name, c.devices, max_output)) {
    out["paper_fig8"] = {{"samples_per_s",
                          {{"verl", p->verl},
                           {"colocate", p->colocation},
                           {"stream", p->sync},
                           {"async", p->async}}},
                         {"stream_over_colocate", p->sync / p->colocation},
                         {"async_over_colocate", p->async / p->colocation},
                         {"async_over_stream", p->async / p->sync}};
  }
  // Fig. 9: generation time on the SGS's devices, Random-FIFO against skew-aware dispatch with the
  // ranker's estimates and with the true lengths.
  {
    const double random = s.p_gen(acc, alloc.gen, Dispatch::kRandom);
    const double ranker = s.p_gen(acc, alloc.gen, Dispatch::kSkewAware);
    const double oracle = s.p_gen(acc, alloc.gen, Dispatch::kSkewAware, /*oracle=*/true);
    out["dispatch"] = {{"random_fifo_s", random},
                       {"skew_aware_s", ranker},
                       {"skew_aware_oracle_s", oracle},
                       {"ranker_speedup", random / ranker},
                       {"oracle_speedup", random / oracle}};
    if (auto p = find_fig9(c.shape.name); p && max_output == 20000) {
      out["paper_fig9"] = {{"ranker_speedup", p->ranker_speedup},
                           {"oracle_speedup", p->oracle_speedup}};
    }
  }
  // Fig. 10: Algorithm 1 against an even split of the same devices.
  const int half = c.devices / 2 / gen_unit * gen_unit;
  if (half >= gen_unit && c.devices - half >= c.unit) {
    const Allocation even{half, c.devices - half, s.p_gen(acc, half, sd),
                          s.p_train(acc, c.devices - half)};
    out["even_split"] = allocation_json(even);
    out["allocation_speedup_over_even"] = even.iteration_seconds() / alloc.iteration_seconds();
    if (auto p = find_fig10(c.shape.name, c.devices); p && max_output == 20000) {
      out["paper_fig10"] = {{"gen", p->gen}, {"train", p->train}, {"speedup", p->speedup}};
    }
  }
  return out;
}

json plan_elastic(const PlanConfig& c) {
  const auto& e = c.elastic;
  if (e.iterations < 1) throw InputError("elastic.iterations must be >= 1");
  // One scenario per iteration with the same seed: lengths grow proportionally, as in Fig. 11.
  std::vector<std::unique_ptr<Scenario>> its;
  for (int i = 0; i < e.iterations; ++i) {
    const double f = e.iterations > 1 ? static_cast<double>(i) / (e.iterations - 1) : 0;
    const int len =
        static_cast<int>(e.start_max_output + f * (e.end_max_output - e.start_max_output));
    its.push_back(std::make_unique<Scenario>(c, len, 1));
  }
  const Accelerator& acc = c.accelerator;
  const Dispatch d = c.streamrl_dispatch;
  const int gen_unit = std::max(e.unit, its.front()->tp(acc));
  const Allocation start = allocate_single(
      c.devices, gen_unit, c.unit, [&](int x) { return its.front()->p_gen(acc, x, d); },
      [&](int y) { return its.front()->p_train(acc, y); });
  const auto steps = elastic_schedule(
      e.iterations, start.gen, start.train, gen_unit, 8 * c.devices,
      [&](int i, int x) { return its[i]->p_gen(acc, x, d); },
      [&](int i, int y) { return its[i]->p_train(acc, y); }, e.min_gain_fraction);
  json rows = json::array(), triggers = json::array();
  for (const auto& st : steps) {
    rows.push_back({{"iteration", st.iteration},
                    {"max_output", its[st.iteration]->max_output()},
                    {"gen", st.gen},
                    {"t_gen", st.t_gen},
                    {"t_train", st.t_train},
                    {"delta", st.delta},
                    {"gain", st.gain},
                    {"scale_out", st.scale_out}});
    if (st.scale_out) {
      triggers.push_back({{"iteration", st.iteration},
                          {"delta", st.delta},
                          {"delta_after", st.delta_after},
                          {"gen_after", st.gen + gen_unit}});
    }
  }
  json paper = json::array();
  for (const auto& t : paper_fig11()) {
    paper.push_back({{"iteration", t.iteration}, {"delta", t.delta_seconds}});
  }
  return {{"start", allocation_json(start)},
          {"train_devices", start.train},
          {"steps", rows},
          {"triggers", triggers},
          {"paper_fig11_triggers", paper}};
}

json plan_heterogeneous(const PlanConfig& c) {
  const auto& h = c.heterogeneous;
  const Accelerator& gacc = find_accelerator(h.gen_accelerator);
  const Accelerator& tacc = find_accelerator(h.train_accelerator);
  const Accelerator& base = c.accelerator;
  const Dispatch d = c.streamrl_dispatch;
  json rows = json::array();
  for (int len : c.max_outputs) {
    const Scenario s(c, len, c.iterations);
    const int gunit = std::max(c.unit, s.tp(gacc));
    const Allocation cross = allocate_cross(
        h.gen_devices, h.train_devices, gunit, c.unit, [&](int x) { return s.p_gen(gacc, x, d); },
        [&](int y) { return s.p_train(tacc, y); });
    const EmulatorResult rc =
        s.run(h.mode, d, gacc, cross.gen, tacc, cross.train, h.link_gb_s, false);
    const int bunit = std::max(c.unit, s.tp(base));
    const Allocation single = allocate_single(
        h.baseline_devices, bunit, c.unit, [&](int x) { return s.p_gen(base, x, d); },
        [&](int y) { return s.p_train(base, y); });
    const EmulatorResult rs =
        s.run(h.mode, d, base, single.gen, base, single.train, intra_dc_gb_s(base), false);
    const Batch& b = s.batches().front();
    const double cost_cross = cross.gen * gacc.price + cross.train * tacc.price;
    const double cost_full = h.gen_devices * gacc.price + h.train_devices * tacc.price;
    const double cost_single = h.baseline_devices * base.price;
    const double tc = throughput(rc, b), ts = throughput(rs, b);
    json row = {{"max_output", len},
                {"cross",
                 {{"allocation", allocation_json(cross)},
                  {"samples_per_s", tc},
                  {"weight_transfer_s", weight_transfer_seconds(c.shape, h.link_gb_s)},
                  {"weight_transfer_fraction",
                   weight_transfer_seconds(c.shape, h.link_gb_s) / rc.steady_iteration_seconds},
                  {"cost", cost_cross},
                  {"per_cost", tc / cost_cross},
                  {"per_cost_full_budget", tc / cost_full}}},
                {"single",
                 {{"allocation", allocation_json(single)},
                  {"samples_per_s", ts},
                  {"cost", cost_single},
                  {"per_cost", ts / cost_single}}},
                {"cost_effectiveness_ratio", (tc / cost_cross) / (ts / cost_single)},
                {"cost_effectiveness_ratio_full_budget", (tc / cost_full) / (ts / cost_single)}};
    if (auto p = find_fig12(len)) row["paper_fig12_ratio"] = p->ratio;
    rows.push_back(row);
  }
  return {{"gen", std::to_string(h.gen_devices) + "x" + gacc.name},
          {"train", std::to_string(h.train_devices) + "x" + tacc.name},
          {"baseline", std::to_string(h.baseline_devices) + "x" + base.name},
          {"mode", mode_name(h.mode)},
          {"rows", rows}};
}

}  // namespace

PlanConfig PlanConfig::from_config(const core::Config& cfg) {
  PlanConfig c;
  if (cfg.has("lina")) c.lina = MoeStepSpec::from_config(cfg.section("lina"));
  const bool cp = cfg.has("context_parallel");
  if ((c.lina || cp) && !cfg.has("model")) {  // an MoE step or context-parallel plan only
    if (cp) {
      c.context_parallel =
          ContextParallelSpec::from_config(cfg.section("context_parallel"), nullptr,
                                           find_accelerator("H800"), c.efficiency.train_mfu);
    }
    c.max_outputs.clear();
    return c;
  }
  const std::string model = cfg.require<std::string>("model");
  if (model.find('/') != std::string::npos || model.ends_with(".json")) {
    c.shape = model_shape_from_hf(json::parse(core::read_file(model), nullptr, false), model);
  } else {
    c.shape = model_preset(model);
  }
  std::string acc = "H800";
  cfg.get("accelerator", acc);
  c.accelerator = find_accelerator(acc);
  cfg.get("devices", c.devices);
  cfg.get("unit", c.unit);
  if (c.devices < 2 || c.unit < 1) throw InputError("devices must be >= 2 and unit >= 1");
  if (cfg.has("max_output")) {
    try {
      cfg.get("max_output", c.max_outputs);
    } catch (const InputError&) {
      int one = 0;
      cfg.get("max_output", one);
      c.max_outputs = {one};
    }
  } else {
    cfg.get("max_output", c.max_outputs);
  }
  const auto w = cfg.section("workload");
  w.get("prompts", c.batch.groups);
  w.get("group_size", c.batch.group_size);
  w.get("prompt_mean", c.batch.prompt_mean);
  w.get("within_group_sigma", c.batch.within_group_sigma);
  w.get("ranker_noise", c.batch.ranker_noise);
  if (c.batch.groups < 1 || c.batch.group_size < 1) throw InputError("workload sizes must be >= 1");
  cfg.section("training").get("flops_per_param_token", c.flops_per_param_token);
  const auto e = cfg.section("efficiency");
  e.get("decode_bandwidth", c.efficiency.decode_bandwidth);
  e.get("decode_compute", c.efficiency.decode_compute);
  e.get("layer_overhead_ms", c.efficiency.layer_overhead_ms);
  e.get("tp_allreduce_ms", c.efficiency.tp_allreduce_ms);
  e.get("train_mfu", c.efficiency.train_mfu);
  const auto em = cfg.section("emulator");
  em.get("iterations", c.iterations);
  em.get("seed", c.seed);
  em.get("long_tail_fraction", c.long_tail_fraction);
  std::string bd = dispatch_name(c.baseline_dispatch), sd = dispatch_name(c.streamrl_dispatch);
  std::string tm = mode_name(c.trace_mode);
  em.get("baseline_dispatch", bd);
  em.get("streamrl_dispatch", sd);
  em.get("trace", c.trace_path);
  em.get("trace_mode", tm);
  c.baseline_dispatch = parse_dispatch(bd);
  c.streamrl_dispatch = parse_dispatch(sd);
  c.trace_mode = parse_mode(tm);
  if (c.iterations < 2) throw InputError("emulator.iterations must be >= 2 (steady state)");
  if (cfg.has("measured")) {
    const auto m = cfg.section("measured");
    auto& d = c.measured;
    d.enabled = true;
    const std::string profile = m.require<std::string>("profile");
    d.table = PtlTable::from_json(json::parse(core::read_file(profile), nullptr, false));
    d.train_tokens_per_s = m.require<double>("train_tokens_per_s");
    m.get("train_scaling", d.train_scaling);
    m.get("optimizer_step_s", d.optimizer_step_s);
    m.get("max_batch", d.max_batch);
    m.get("micro_batch_tokens", d.micro_batch_tokens);
    m.get("copy_gb_s", d.copy_gb_s);
    if (!(d.train_tokens_per_s > 0) || d.max_batch < 1 || !(d.copy_gb_s > 0)) {
      throw InputError("measured: train_tokens_per_s, max_batch and copy_gb_s must be positive");
    }
    c.accelerator.name = "core (measured)";
  }
  if (cfg.has("elastic")) {
    const auto s = cfg.section("elastic");
    c.elastic.enabled = true;
    s.get("iterations", c.elastic.iterations);
    s.get("start_max_output", c.elastic.start_max_output);
    s.get("end_max_output", c.elastic.end_max_output);
    s.get("unit", c.elastic.unit);
    s.get("min_gain_fraction", c.elastic.min_gain_fraction);
  }
  if (cfg.has("heterogeneous")) {
    if (c.measured.enabled) throw InputError("heterogeneous plans need catalogue accelerators");
    const auto s = cfg.section("heterogeneous");
    auto& h = c.heterogeneous;
    h.enabled = true;
    s.get("gen_accelerator", h.gen_accelerator);
    s.get("gen_devices", h.gen_devices);
    s.get("train_accelerator", h.train_accelerator);
    s.get("train_devices", h.train_devices);
    s.get("link_gb_s", h.link_gb_s);
    s.get("baseline_devices", h.baseline_devices);
    h.mode = core::read_mode(s, "mode", h.mode);
  }
  if (cp) {
    c.context_parallel = ContextParallelSpec::from_config(cfg.section("context_parallel"), &c.shape,
                                                          c.accelerator, c.efficiency.train_mfu);
  }
  return c;
}

nlohmann::json run_plan(const PlanConfig& c) {
  if (c.max_outputs.empty()) {
    json out = json::object();
    if (c.lina) out["lina"] = project_lina(*c.lina);
    if (c.context_parallel) out["context_parallel"] = plan_context_parallel(*c.context_parallel);
    return out;
  }
  json scenarios = json::array();
  for (size_t i = 0; i < c.max_outputs.size(); ++i) {
    scenarios.push_back(plan_scenario(c, c.max_outputs[i], i == 0));
  }
  json out = {{"model", c.shape.name},
              {"parameters", c.shape.params()},
              {"accelerator", c.accelerator.name},
              {"devices", c.devices},
              {"workload",
               {{"prompts", c.batch.groups},
                {"group_size", c.batch.group_size},
                {"ranker_noise", c.batch.ranker_noise}}},
              {"scenarios", scenarios}};
  if (c.elastic.enabled) out["elastic"] = plan_elastic(c);
  if (c.heterogeneous.enabled) out["heterogeneous"] = plan_heterogeneous(c);
  if (!c.trace_path.empty()) out["trace"] = c.trace_path;
  if (c.lina) out["lina"] = project_lina(*c.lina);
  if (c.context_parallel) out["context_parallel"] = plan_context_parallel(*c.context_parallel);
  return out;
}

namespace {

std::string format_lina(const json& l) {
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line,
                "expert-parallel step of %s: %d experts on %d x %s, %.1f GB/s per device link\n"
                "  %-11s %9s %11s %13s\n",
                l["model"].get<std::string>().c_str(), l["experts"].get<int>(),
                l["devices"].get<int>(), l["accelerator"].get<std::string>().c_str(),
                l["link_gb_s"].get<double>(), "policy", "step_ms", "backward_ms", "all_to_all_ms");
  s += line;
  for (const char* name : {"fair_share", "priority", "lina"}) {
    const json& r = l["policies"][name];
    std::snprintf(line, sizeof line, "  %-11s %9.1f %11.1f %13.1f\n", name,
                  1e3 * r["step_s"].get<double>(), 1e3 * r["backward_s"].get<double>(),
                  1e3 * r["all_to_all_s"].get<double>());
    s += line;
  }
  std::snprintf(line, sizeof line,
                "  Lina over fair sharing: step %.2fx (paper 1.37-1.73x), backward all-to-all "
                "%.2fx (paper 2.2-2.4x)\n",
                l["train_speedup"].get<double>(), l["a2a_speedup"].get<double>());
  s += line;
  s += "  by all-to-all chunk (tokens: step, all-to-all):";
  for (const auto& c : l["a2a_chunk_sweep"]) {
    std::snprintf(line, sizeof line, " %lld: %.2fx, %.2fx;",
                  static_cast<long long>(c["chunk_tokens"].get<int64_t>()),
                  c["train_speedup"].get<double>(), c["a2a_speedup"].get<double>());
    s += line;
  }
  s.back() = '\n';
  return s;
}

}  // namespace

std::string format_plan(const nlohmann::json& p) {
  std::string s;
  char line[512];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    s += line;
  };
  if (!p.contains("scenarios")) {
    if (p.contains("lina")) s += format_lina(p["lina"]);
    if (p.contains("context_parallel")) {
      s += (s.empty() ? "" : "\n") + format_context_parallel(p["context_parallel"]);
    }
    return s;
  }
  const double params = p["parameters"].get<double>();
  add("%s (%.1f%s parameters) on %d x %s, %d prompts x %d\n", p["model"].get<std::string>().c_str(),
      params >= 1e9 ? params / 1e9 : params / 1e6, params >= 1e9 ? "B" : "M",
      p["devices"].get<int>(), p["accelerator"].get<std::string>().c_str(),
      p["workload"]["prompts"].get<int>(), p["workload"]["group_size"].get<int>());
  for (const auto& sc : p["scenarios"]) {
    const auto& a = sc["allocation"];
    add("\nmax output %d (mean %.0f, TP %d, ranker recall@20%% %.2f): Algorithm 1 split %d gen / "
        "%d train (T_gen %.1f s, T_train %.1f s)\n",
        sc["max_output"].get<int>(), sc["mean_output"].get<double>(), sc["tp"].get<int>(),
        sc["ranker_recall_top20"].get<double>(), a["gen"].get<int>(), a["train"].get<int>(),
        a["t_gen"].get<double>(), a["t_train"].get<double>());
    add("  %-9s %9s %10s %10s %9s %9s %s\n", "mode", "iter_s", "samples/s", "gen/train", "gen_idle",
        "trn_idle", "paper samples/s");
    for (const char* m : {"colocate", "disagg", "stream", "async"}) {
      const auto& r = sc["modes"][m];
      std::string paper = "-";
      if (sc.contains("paper_fig8") && sc["paper_fig8"]["samples_per_s"].contains(m)) {
        paper = std::to_string(sc["paper_fig8"]["samples_per_s"][m].get<double>()).substr(0, 5);
      }
      add("  %-9s %9.1f %10.2f %4d/%-5d %9.2f %9.2f %s\n", m,
          r["steady_iteration_seconds"].get<double>(), r["samples_per_s_steady"].get<double>(),
          r["gen_devices"].get<int>(), r["train_devices"].get<int>(),
          r["gen_idle_fraction"].get<double>(), r["train_idle_fraction"].get<double>(),
          paper.c_str());
    }
    for (const char* k : {"stream_over_colocate", "async_over_colocate", "async_over_stream"}) {
      if (sc.contains("paper_fig8")) {
        add("  %-22s ours %.2f  paper %.2f\n", k, sc["ratios"][k].get<double>(),
            sc["paper_fig8"][k].get<double>());
      } else {
        add("  %-22s ours %.2f\n", k, sc["ratios"][k].get<double>());
      }
    }
    const auto& d = sc["dispatch"];
    add("  generation vs Random-FIFO: skew-aware %.2fx, with oracle lengths %.2fx",
        d["ranker_speedup"].get<double>(), d["oracle_speedup"].get<double>());
    if (sc.contains("paper_fig9")) {
      add("  paper: %.2fx, %.2fx", sc["paper_fig9"]["ranker_speedup"].get<double>(),
          sc["paper_fig9"]["oracle_speedup"].get<double>());
    }
    s += "\n";
    if (sc.contains("even_split")) {
      add("  Algorithm 1 over even split (%d/%d): %.2fx", sc["even_split"]["gen"].get<int>(),
          sc["even_split"]["train"].get<int>(), sc["allocation_speedup_over_even"].get<double>());
      if (sc.contains("paper_fig10")) {
        add("  paper: %d/%d, %.2fx", sc["paper_fig10"]["gen"].get<int>(),
            sc["paper_fig10"]["train"].get<int>(), sc["paper_fig10"]["speedup"].get<double>());
      }
      s += "\n";
    }
  }
  if (p.contains("elastic")) {
    const auto& e = p["elastic"];
    add("\nelastic scale-out (trainer %d devices, SGS starts at %d):\n",
        e["train_devices"].get<int>(), e["start"]["gen"].get<int>());
    add("  %4s %7s %5s %8s %8s %8s %8s\n", "iter", "max_out", "gen", "T_gen", "T_train", "delta",
        "gain");
    for (const auto& r : e["steps"]) {
      add("  %4d %7d %5d %8.1f %8.1f %8.1f %8.1f%s\n", r["iteration"].get<int>(),
          r["max_output"].get<int>(), r["gen"].get<int>(), r["t_gen"].get<double>(),
          r["t_train"].get<double>(), r["delta"].get<double>(), r["gain"].get<double>(),
          r["scale_out"].get<bool>() ? "  <- +unit" : "");
    }
    s += "  paper (Fig. 11) added a node at iterations";
    for (const auto& t : e["paper_fig11_triggers"]) {
      add(" %d (delta %.1f s)", t["iteration"].get<int>(), t["delta"].get<double>());
    }
    s += "\n";
  }
  if (p.contains("heterogeneous")) {
    const auto& h = p["heterogeneous"];
    add("\ncost-effectiveness (%s mode): %s gen + %s train across datacenters vs %s\n",
        h["mode"].get<std::string>().c_str(), h["gen"].get<std::string>().c_str(),
        h["train"].get<std::string>().c_str(), h["baseline"].get<std::string>().c_str());
    for (const auto& r : h["rows"]) {
      add("  max output %5d: cross %d/%d %.2f samples/s per cost %.4f; single %d/%d %.2f samples/s "
          "per cost %.4f; ratio %.2f (full budget %.2f)",
          r["max_output"].get<int>(), r["cross"]["allocation"]["gen"].get<int>(),
          r["cross"]["allocation"]["train"].get<int>(), r["cross"]["samples_per_s"].get<double>(),
          r["cross"]["per_cost"].get<double>(), r["single"]["allocation"]["gen"].get<int>(),
          r["single"]["allocation"]["train"].get<int>(), r["single"]["samples_per_s"].get<double>(),
          r["single"]["per_cost"].get<double>(), r["cost_effectiveness_ratio"].get<double>(),
          r["cost_effectiveness_ratio_full_budget"].get<double>());
      if (r.contains("paper_fig12_ratio")) {
        add("  paper %.2f", r["paper_fig12_ratio"].get<double>());
      }
      add("\n    weight transfer over the link %.1f s = %.1f%% of an iteration\n",
          r["cross"]["weight_transfer_s"].get<double>(),
          100 * r["cross"]["weight_transfer_fraction"].get<double>());
    }
  }
  if (p.contains("lina")) s += "\n" + format_lina(p["lina"]);
  if (p.contains("context_parallel")) s += "\n" + format_context_parallel(p["context_parallel"]);
  return s;
}

}  // namespace streamrl::planner
