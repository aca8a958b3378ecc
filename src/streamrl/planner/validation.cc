#include "streamrl/planner/validation.h"
#include "streamrl/core/stats.h"

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

Mode label_mode(const std::string& label) { return parse_mode(label.substr(0, label.find('_'))); }

MeasuredRun MeasuredRun::from_json(const json& j) {
  if (!j.is_object()) throw InputError("rl_modes JSON: expected an object");
  MeasuredRun r;
  const json* modes = j.contains("modes") ? &j["modes"] : &j;
  const json* workload = j.contains("workload") ? &j["workload"] : nullptr;
  // The workload's batch (colocate's); without one, the largest per-mode batch stands for it.
  const json* workload_batch = find_key({workload, &j}, {"max_batch_size", "max_batch"});
  try {
    if (workload_batch) r.max_batch = workload_batch->get<int>();
    for (const auto& [label, m] : modes->items()) {
      if (!m.is_object()) continue;
      const std::string base = label.substr(0, label.find('_'));
      if (base != "colocate" && base != "disagg" && base != "stream" && base != "async") continue;
      const std::string& name = label;
      const std::vector<const json*> scopes = {&m, workload, &j};
      if (r.prompts == 0) {
        read_opt(scopes, {"prompts_per_iteration", "prompts"}, r.prompts);
        read_opt(scopes, {"group_size"}, r.group_size);
        read_opt(scopes, {"iterations"}, r.iterations);
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
      r.iteration_seconds[label] = it;
      if (const json* b = find_key({&m}, {"max_batch_size", "max_batch"})) {
        r.batch[label] = b->get<int>();
        if (r.batch[label] < 1) throw InputError("rl_modes JSON: '" + name + "' max_batch_size");
      }
      if (m.contains("stage_seconds")) r.stage_seconds[label] = m["stage_seconds"];
      if (m.contains("generate_s") && m.contains("train_s")) {
        r.stages[label] = {m["generate_s"].get<double>(), m["train_s"].get<double>()};
      } else if (m.contains("stage_seconds") && m["stage_seconds"].contains("generate") &&
                 m["stage_seconds"].contains("train")) {
        r.stages[label] = {m["stage_seconds"]["generate"].get<double>(),
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
        if (const json* z = find_key({&m}, {"zero_advantage"}); z && z->size() == lens.size()) {
          // A group is skipped when every one of its samples had advantage 0.
          for (const auto& flags : *z) {
            const auto f = flags.get<std::vector<int>>();
            std::vector<int> groups;
            for (size_t g = 0; r.group_size > 0 && (g + 1) * r.group_size <= f.size(); ++g) {
              bool all = true;
              for (int i = 0; i < r.group_size; ++i) all = all && f[g * r.group_size + i] != 0;
              groups.push_back(all);
            }
            r.skipped_groups[label].push_back(std::move(groups));
          }
        }
        if (const json* a = find_key({&m}, {"released_after"}); a && a->size() == lens.size()) {
          r.released_after[label] = a->get<std::vector<std::vector<int>>>();
        }
      } else if (const json* per = find_key({&m}, {"response_length_per_iteration"})) {
        for (const auto& st : *per) {
          const int n = st.value("samples", r.prompts * r.group_size);
          if (n <= 0) throw InputError("rl_modes JSON: prompts_per_iteration is required");
          lens.push_back(lengths_from_stats(st, n));
          if (st.contains("skipped")) r.skipped[label].push_back(st["skipped"].get<int>());
        }
        if (lens.empty()) throw InputError("rl_modes JSON: empty response_length_per_iteration");
      } else if (const json* st = find_key({&m, workload, &j}, {"response_length"})) {
        if (r.prompts <= 0) throw InputError("rl_modes JSON: prompts_per_iteration is required");
        lens = {lengths_from_stats(*st, r.prompts * r.group_size)};
      } else {
        throw InputError(std::string("rl_modes JSON: mode '") + name +
                         "' has no lengths or response_length {p50, p90, max}");
      }
      r.lengths[label] = lens;
    }
  } catch (const json::exception& e) {
    throw InputError(std::string("rl_modes JSON: ") + e.what());
  }
  if (r.iteration_seconds.empty()) {
    throw InputError("rl_modes JSON: no modes (expected keys colocate/disagg/stream/async)");
  }
  if (r.group_size < 1) throw InputError("rl_modes JSON: group_size must be >= 1");
  if (!workload_batch && !r.batch.empty()) r.max_batch = 0;
  for (const auto& [label, b] : r.batch) r.max_batch = std::max(r.max_batch, b);
  return r;
}

int MeasuredRun::batch_of(const std::string& label) const {
  const auto it = batch.find(label);
  return it == batch.end() ? max_batch : it->second;
}

int MeasuredRun::dedicated_batch() const {
  for (const auto& [label, seconds] : iteration_seconds) {
    if (label_mode(label) != Mode::kColocate) return batch_of(label);
  }
  return max_batch;
}

namespace {

EmulatorInput make_input(const MeasuredRun& run, const std::string& label, const ModeSetup& s) {
  EmulatorInput in;
  in.mode = label_mode(label);
  in.dispatch = Dispatch::kRandom;  // one instance: FIFO admission in request order
  in.instances = {s.generator};
  in.trainer = s.trainer;
  in.weight_update_s = s.weight_update_s;
  const auto& lens = run.lengths.at(label);
  const auto skipped_it = run.skipped.find(label);
  for (int k = 0; k < std::max(1, run.iterations); ++k) {
    const size_t at = std::min<size_t>(k, lens.size() - 1);
    const std::vector<int>& l = lens[at];
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
    if (const auto sg = run.skipped_groups.find(label);
        sg != run.skipped_groups.end() && at < sg->second.size() &&
        static_cast<int>(sg->second[at].size()) == groups) {
      b.skipped.assign(sg->second[at].begin(), sg->second[at].end());
    } else if (skipped_it != run.skipped.end() && at < skipped_it->second.size()) {
      // Which groups had equal rewards is not recorded, only how many: spread them evenly.
      const int n = std::min(groups, skipped_it->second[at] / run.group_size);
      b.skipped.assign(groups, 0);
      for (int i = 0; i < n; ++i) b.skipped[static_cast<int64_t>(i) * groups / n] = 1;
    }
    if (const auto ra = run.released_after.find(label);
        ra != run.released_after.end() && at < ra->second.size() &&
        static_cast<int>(ra->second[at].size()) == groups) {
      b.released_after = ra->second[at];
    }
    in.batches.push_back(std::move(b));
  }
  return in;
}

// Median generation and trainer-busy seconds per iteration, the first excluded in steady state.
std::pair<double, double> stage_medians(const EmulatorResult& r, bool steady) {
  std::vector<double> gen, train;
  for (size_t k = steady && r.iterations.size() > 1 ? 1 : 0; k < r.iterations.size(); ++k) {
    gen.push_back(r.iterations[k].gen_end - r.iterations[k].gen_start);
    train.push_back(r.iterations[k].train_busy);
  }
  return {core::median(gen), core::median(train)};
}

double predicted_seconds(const MeasuredRun& run, const EmulatorResult& r) {
  return run.steady_state ? r.steady_iteration_seconds : r.iteration_seconds;
}

// Setup with the interference slowdowns folded into the speeds. Only stream and async overlap the
// stages; the share of each stage's time overlapped is taken from the emulated stage times
// (generation overlaps the trainer's micro-batches almost fully, the trainer overlaps generation
// for gen/train of its time), iterated to a fixed point because slowing one stage lengthens it.
ModeSetup with_interference(const MeasuredRun& run, const std::string& label, const ModeSetup& s,
                            json* info) {
  const Mode mode = label_mode(label);
  if ((mode != Mode::kStream && mode != Mode::kAsync) ||
      (s.gen_slowdown == 1 && s.train_slowdown == 1)) {
    return s;
  }
  double kg = 1, kt = 1;
  ModeSetup out = s;
  for (int round = 0; round < 4; ++round) {
    const EmulatorResult r = emulate(make_input(run, label, out));
    const double gen = r.gen_seconds, train = r.train_seconds;
    if (!(gen > 0) || !(train > 0)) break;
    const double gen_share = std::min(1.0, train / gen), train_share = std::min(1.0, gen / train);
    kg = 1 + (s.gen_slowdown - 1) * gen_share;
    kt = 1 + (s.train_slowdown - 1) * train_share;
    out = s;
    const StepFn step = s.generator.step_seconds;
    out.generator.step_seconds = [step, kg](double b, double c) { return kg * step(b, c); };
    out.generator.prefill_tokens_per_s /= kg;
    out.trainer.tokens_per_s /= kt;
  }
  if (info) *info = {{"gen_factor", kg}, {"train_factor", kt}};
  return out;
}

}  // namespace

json compare_modes(const MeasuredRun& run, const std::map<std::string, ModeSetup>& setups) {
  json modes = json::object();
  // Colocate runs in several thread variants; the fastest is the baseline bench rl_modes compares
  // against and the one that stands for the mode here. The others count in the *_all_variants
  // figures (two OpenMP threads on this machine's two busy cores swing 2-3x between runs).
  std::string colocate_baseline;
  for (const auto& [label, measured] : run.iteration_seconds) {
    if (label_mode(label) != Mode::kColocate) continue;
    if (colocate_baseline.empty() || measured < run.iteration_seconds.at(colocate_baseline)) {
      colocate_baseline = label;
    }
  }
  auto stands_for_mode = [&](const std::string& label) {
    return label_mode(label) != Mode::kColocate || label == colocate_baseline;
  };
  double worst = 0, worst_cal = 0, worst_all = 0, worst_cal_all = 0;
  for (const auto& [label, measured] : run.iteration_seconds) {
    auto it = setups.find(label);
    if (it == setups.end()) throw InputError("no emulator setup for measured run " + label);
    const Mode mode = label_mode(label);
    json interference;
    const EmulatorResult r =
        emulate(make_input(run, label, with_interference(run, label, it->second, &interference)));
    const double predicted = predicted_seconds(run, r);
    const double err = std::abs(predicted - measured) / measured;
    worst_all = std::max(worst_all, err);
    if (stands_for_mode(label)) worst = std::max(worst, err);
    json& out = modes[label];
    out = {{"measured_s", measured},
           {"predicted_s", predicted},
           {"relative_error", err},
           {"predicted", r.to_json()}};
    if (!interference.is_null()) out["interference"] = interference;
    if (run.stage_seconds.count(label)) out["measured_stages"] = run.stage_seconds.at(label);
    if (run.stages.count(label)) {
      out["measured_generate_s"] = run.stages.at(label).first;
      out["measured_train_s"] = run.stages.at(label).second;
    }
    // The emulated stages on the measured ones' terms (steady-state medians), to see which is off.
    const auto [gen_p, train_p] = stage_medians(r, run.steady_state);
    out["predicted_generate_s"] = gen_p;
    out["predicted_train_s"] = train_p;

    // Stage calibration. Speeds alone come from a run without overlapping stages: colocate runs
    // calibrate on themselves (their speeds depend on the thread count), stream and async on
    // disagg. Stream and async then get interference factors FITTED so that their emulated stage
    // medians equal their own measured ones (the overlap share model of with_interference turns
    // a slowdown while both run into whole-stage times). Fitted from stage times only, never from
    // the iteration time, so what is tested is the overlap and the bubble structure of the mode.
    std::string ref = mode == Mode::kColocate || mode == Mode::kDisagg ? label : "disagg";
    if (!run.stages.count(ref) || !setups.count(ref)) ref = label;
    if (!run.stages.count(ref) || !setups.count(ref)) continue;
    ModeSetup plain = setups.at(ref);
    plain.gen_slowdown = plain.train_slowdown = 1;
    const auto [gen_e, train_e] =
        stage_medians(emulate(make_input(run, ref, plain)), run.steady_state);
    const auto [gen_m, train_m] = run.stages.at(ref);
    if (!(gen_e > 0) || !(train_e > 0) || !(gen_m > 0) || !(train_m > 0)) continue;
    const double kg = gen_m / gen_e, kt = train_m / train_e;
    ModeSetup cal = it->second;
    cal.gen_slowdown = cal.train_slowdown = 1;
    const StepFn step = cal.generator.step_seconds;
    cal.generator.step_seconds = [step, kg](double b, double c) { return kg * step(b, c); };
    cal.generator.prefill_tokens_per_s /= kg;
    cal.trainer.tokens_per_s /= kt;
    cal.trainer.step_overhead_s *= kt;
    const bool overlapping = mode == Mode::kStream || mode == Mode::kAsync;
    if (overlapping && ref != label && run.stages.count(label)) {
      const auto [own_gen, own_train] = run.stages.at(label);
      for (int round = 0; round < 6; ++round) {
        const auto [eg, et] = stage_medians(
            emulate(make_input(run, label, with_interference(run, label, cal, nullptr))),
            run.steady_state);
        if (!(eg > 0) || !(et > 0)) break;
        cal.gen_slowdown = std::max(1.0, cal.gen_slowdown * own_gen / eg);
        cal.train_slowdown = std::max(1.0, cal.train_slowdown * own_train / et);
      }
      out["fitted_interference"] = {
          {"gen_slowdown", cal.gen_slowdown},
          {"train_slowdown", cal.train_slowdown},
          {"stage_ratio_to_disagg",
           {{"generate", own_gen / gen_m}, {"train", own_train / train_m}}}};
    }
    const double calibrated = predicted_seconds(
        run, emulate(make_input(run, label, with_interference(run, label, cal, nullptr))));
    const double cal_err = std::abs(calibrated - measured) / measured;
    worst_cal_all = std::max(worst_cal_all, cal_err);
    if (stands_for_mode(label)) worst_cal = std::max(worst_cal, cal_err);
    out["calibrated_s"] = calibrated;
    out["calibrated_error"] = cal_err;
    out["calibration"] = {{"reference_mode", ref}, {"gen_scale", kg}, {"train_scale", kt}};
  }
  return {{"modes", modes},
          {"max_relative_error", worst},
          {"max_relative_error_stage_calibrated", worst_cal},
          {"colocate_baseline", colocate_baseline},
          {"max_relative_error_all_variants", worst_all},
          {"max_relative_error_stage_calibrated_all_variants", worst_cal_all},
          {"compared", run.steady_state ? "steady-state iteration (first excluded)"
                                        : "mean iteration (wall / iterations)"}};
}

}  // namespace streamrl::planner
