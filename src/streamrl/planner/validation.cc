#include "streamrl/planner/validation.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

using nlohmann::json;

// The first of `keys` found in `scopes` (searched in order), or nullptr.
const json* find_key(const std::vector<const json*>& scopes,
                     std::initializer_list<const char*> keys) {
  for (const json* s : scopes) {
    if (!s || !s->is_object()) continue;
    for (const char* k : keys) {
      if (s->contains(k) && !(*s)[k].is_null()) return &(*s)[k];
    }
  }
  return nullptr;
}

template <class T>
void read_opt(const std::vector<const json*>& scopes, std::initializer_list<const char*> keys,
              T& out) {
  if (const json* v = find_key(scopes, keys)) out = v->get<T>();
}

// Lengths of a batch from its quantiles when the run did not list them: piecewise linear through
// (0, ~p50 - (p90 - p50)), (0.5, p50), (0.9, p90), (1, max), shuffled deterministically.
std::vector<int> lengths_from_stats(const json& st, int count) {
  const double p50 = st.at("p50").get<double>(), p90 = st.at("p90").get<double>();
  const double mx = st.value("max", p90);
  const double lo = std::max(1.0, p50 - (p90 - p50));
  std::vector<int> out;
  for (int i = 0; i < count; ++i) {
    const double q = (i + 0.5) / count;
    double v = q < 0.5   ? lo + (p50 - lo) * q / 0.5
               : q < 0.9 ? p50 + (p90 - p50) * (q - 0.5) / 0.4
                         : p90 + (mx - p90) * (q - 0.9) / 0.1;
    out.push_back(std::max(1, static_cast<int>(std::lround(v))));
  }
  std::shuffle(out.begin(), out.end(), std::mt19937_64(7));
  return out;
}

}  // namespace

MeasuredRun MeasuredRun::from_json(const json& j) {
  if (!j.is_object()) throw InputError("rl_modes JSON: expected an object");
  MeasuredRun r;
  const json* modes = j.contains("modes") ? &j["modes"] : &j;
  const json* workload = j.contains("workload") ? &j["workload"] : nullptr;
  try {
    for (const char* name : {"colocate", "disagg", "stream", "async"}) {
      if (!modes->contains(name)) continue;
      const json& m = (*modes)[name];
      const Mode mode = parse_mode(name);
      const std::vector<const json*> scopes = {&m, workload, &j};
      if (r.prompts == 0) {
        read_opt(scopes, {"prompts_per_iteration", "prompts"}, r.prompts);
        read_opt(scopes, {"group_size"}, r.group_size);
        read_opt(scopes, {"iterations"}, r.iterations);
        read_opt(scopes, {"max_batch_size", "max_batch"}, r.max_batch);
        read_opt(scopes, {"micro_batch_tokens"}, r.micro_batch_tokens);
        // rl_modes gives colocate all `cores` and splits them between generator and trainer.
        if (const json* c = find_key(scopes, {"cores"})) {
          const int cores = c->get<int>();
          r.colocate_threads = cores;
          r.generator_threads = std::max(1, cores / 2);
          r.trainer_threads = std::max(1, cores - cores / 2);
        }
        read_opt(scopes, {"colocate_threads", "threads"}, r.colocate_threads);
        read_opt(scopes, {"generator_threads"}, r.generator_threads);
        read_opt(scopes, {"trainer_threads"}, r.trainer_threads);
        read_opt(scopes, {"prompt_tokens_mean"}, r.prompt_tokens_mean);
        read_opt(scopes, {"checkpoint", "init_from"}, r.checkpoint);
      }
      double it = 0;
      if (const json* v =
              find_key({&m}, {"iteration_s", "iteration_seconds", "seconds_per_iteration"})) {
        it = v->get<double>();
      } else if (m.contains("stage_seconds") && m["stage_seconds"].contains("iteration")) {
        it = m["stage_seconds"]["iteration"].get<double>();
      } else if (m.contains("wall_seconds")) {
        it = m["wall_seconds"].get<double>() / std::max(1, r.iterations);
        r.steady_state = false;
      } else {
        throw InputError(std::string("rl_modes JSON: mode '") + name +
                         "' has no iteration_s (or iteration_seconds, stage_seconds.iteration)");
      }
      if (!(it > 0)) throw InputError(std::string("rl_modes JSON: '") + name + "' iteration time");
      r.iteration_seconds[mode] = it;
      if (m.contains("stage_seconds")) r.stage_seconds[mode] = m["stage_seconds"];
      if (m.contains("generate_s") && m.contains("train_s")) {
        r.stages[mode] = {m["generate_s"].get<double>(), m["train_s"].get<double>()};
      } else if (m.contains("stage_seconds") && m["stage_seconds"].contains("generate") &&
                 m["stage_seconds"].contains("train")) {
        r.stages[mode] = {m["stage_seconds"]["generate"].get<double>(),
                          m["stage_seconds"]["train"].get<double>()};
      }
      std::vector<std::vector<int>> lens;
      if (const json* v =
              find_key({&m, workload, &j}, {"lengths", "output_lengths", "response_lengths"})) {
        if (!v->is_array() || v->empty()) throw InputError("rl_modes JSON: empty lengths");
        if ((*v)[0].is_array()) {
          lens = v->get<std::vector<std::vector<int>>>();
        } else {
          lens = {v->get<std::vector<int>>()};
        }
      } else if (const json* per = find_key({&m}, {"response_length_per_iteration"})) {
        for (const auto& st : *per) {
          const int n = st.value("samples", r.prompts * r.group_size);
          if (n <= 0) throw InputError("rl_modes JSON: prompts_per_iteration is required");
          lens.push_back(lengths_from_stats(st, n));
        }
        if (lens.empty()) throw InputError("rl_modes JSON: empty response_length_per_iteration");
      } else if (const json* st = find_key({&m, workload, &j}, {"response_length"})) {
        if (r.prompts <= 0) throw InputError("rl_modes JSON: prompts_per_iteration is required");
        lens = {lengths_from_stats(*st, r.prompts * r.group_size)};
      } else {
        throw InputError(std::string("rl_modes JSON: mode '") + name +
                         "' has no lengths or response_length {p50, p90, max}");
      }
      r.lengths[mode] = lens;
    }
  } catch (const json::exception& e) {
    throw InputError(std::string("rl_modes JSON: ") + e.what());
  }
  if (r.iteration_seconds.empty()) {
    throw InputError("rl_modes JSON: no modes (expected keys colocate/disagg/stream/async)");
  }
  if (r.group_size < 1) throw InputError("rl_modes JSON: group_size must be >= 1");
  return r;
}

namespace {

EmulatorInput make_input(const MeasuredRun& run, Mode mode, const ModeSetup& s) {
  EmulatorInput in;
  in.mode = mode;
  in.dispatch = Dispatch::kRandom;  // one instance: FIFO admission in request order
  in.instances = {s.generator};
  in.trainer = s.trainer;
  in.weight_update_s = s.weight_update_s;
  const auto& lens = run.lengths.at(mode);
  for (int k = 0; k < std::max(1, run.iterations); ++k) {
    const std::vector<int>& l = lens[std::min<size_t>(k, lens.size() - 1)];
    Batch b;
    b.group_size = run.group_size;
    const int groups = static_cast<int>(l.size()) / run.group_size;
    if (groups < 1) throw InputError("rl_modes JSON: fewer lengths than one group");
    for (int g = 0; g < groups; ++g) {
      b.prompt_tokens.push_back(static_cast<int>(std::lround(run.prompt_tokens_mean)));
      double sum = 0;
      for (int i = 0; i < run.group_size; ++i) {
        b.output_tokens.push_back(std::max(1, l[g * run.group_size + i]));
        sum += b.output_tokens.back();
      }
      b.estimate.push_back(sum / run.group_size);
    }
    in.batches.push_back(std::move(b));
  }
  return in;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median generation and trainer-busy seconds per iteration, the first excluded in steady state.
std::pair<double, double> stage_medians(const EmulatorResult& r, bool steady) {
  std::vector<double> gen, train;
  for (size_t k = steady && r.iterations.size() > 1 ? 1 : 0; k < r.iterations.size(); ++k) {
    gen.push_back(r.iterations[k].gen_end - r.iterations[k].gen_start);
    train.push_back(r.iterations[k].train_busy);
  }
  return {median(gen), median(train)};
}

double predicted_seconds(const MeasuredRun& run, const EmulatorResult& r) {
  return run.steady_state ? r.steady_iteration_seconds : r.iteration_seconds;
}

}  // namespace

json compare_modes(const MeasuredRun& run, const std::map<Mode, ModeSetup>& setups) {
  json modes = json::object();
  double worst = 0, worst_cal = 0;
  for (const auto& [mode, measured] : run.iteration_seconds) {
    auto it = setups.find(mode);
    if (it == setups.end()) throw InputError("no emulator setup for mode " + mode_name(mode));
    const EmulatorResult r = emulate(make_input(run, mode, it->second));
    const double predicted = predicted_seconds(run, r);
    const double err = std::abs(predicted - measured) / measured;
    worst = std::max(worst, err);
    json& out = modes[mode_name(mode)];
    out = {{"measured_s", measured},
           {"predicted_s", predicted},
           {"relative_error", err},
           {"predicted", r.to_json()}};
    if (run.stage_seconds.count(mode)) out["measured_stages"] = run.stage_seconds.at(mode);

    Mode ref = mode == Mode::kColocate ? Mode::kColocate : Mode::kDisagg;
    if (!run.stages.count(ref) || !setups.count(ref)) ref = mode;
    if (!run.stages.count(ref)) continue;
    const auto [gen_e, train_e] =
        stage_medians(emulate(make_input(run, ref, setups.at(ref))), run.steady_state);
    const auto [gen_m, train_m] = run.stages.at(ref);
    if (!(gen_e > 0) || !(train_e > 0) || !(gen_m > 0) || !(train_m > 0)) continue;
    const double kg = gen_m / gen_e, kt = train_m / train_e;
    ModeSetup cal = it->second;
    const StepFn step = cal.generator.step_seconds;
    cal.generator.step_seconds = [step, kg](double b, double c) { return kg * step(b, c); };
    cal.generator.prefill_tokens_per_s /= kg;
    cal.trainer.tokens_per_s /= kt;
    cal.trainer.step_overhead_s *= kt;
    const double calibrated = predicted_seconds(run, emulate(make_input(run, mode, cal)));
    const double cal_err = std::abs(calibrated - measured) / measured;
    worst_cal = std::max(worst_cal, cal_err);
    out["calibrated_s"] = calibrated;
    out["calibrated_error"] = cal_err;
    out["calibration"] = {
        {"reference_mode", mode_name(ref)}, {"gen_scale", kg}, {"train_scale", kt}};
  }
  return {{"modes", modes},
          {"max_relative_error", worst},
          {"max_relative_error_stage_calibrated", worst_cal},
          {"compared", run.steady_state ? "steady-state iteration (first excluded)"
                                        : "mean iteration (wall / iterations)"}};
}

}  // namespace streamrl::planner
