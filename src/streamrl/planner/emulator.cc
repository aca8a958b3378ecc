#include "streamrl/planner/emulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>
#include <random>
#include <set>

#include "streamrl/core/batching_sim.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/packing.h"

namespace streamrl::planner {
namespace {

constexpr int kGenPid = 1, kTrainPid = 2;

// Eq. 2 latency of `seqs` sequences of length `len` spread over `n` instances.
double group_latency(const InstanceModel& inst, int seqs, double len, double prompt, int n) {
  if (seqs == 0) return 0;
  if (n == 0) return 1e300;
  const int m = (seqs + n - 1) / n;
  const int bs = std::max(1, std::min(m, inst.max_batch));
  return inst.step_seconds(bs, prompt + len / 2) * len * ((m + bs - 1) / bs);
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

// Assigns `groups` (sorted longest first) to instances [first, first + n) greedily: each to the
// instance with the least estimated work so far (LPT list scheduling).
void assign_lpt(const std::vector<int>& groups, const Batch& b, int first, int n,
                std::vector<int>& instance_of_group) {
  std::vector<double> load(n, 0);
  for (int g : groups) {
    const int i = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[i] += b.estimate[g] * b.group_size;
    instance_of_group[g] = first + i;
  }
}

// Padded tokens of the micro-batches a trainer runs now out of sequences of `lens` tokens, packed
// as rl::PolicyStep packs them (core::pack_eager: with `more_coming`, partly filled or mostly
// padded micro-batches wait). The lengths that wait stay in `lens`.
int64_t pack_padded(std::vector<int>& lens, int64_t budget, bool more_coming) {
  const std::vector<int64_t> lengths(lens.begin(), lens.end());
  const core::EagerPacks packs = core::pack_eager(lengths, budget, more_coming);
  const int64_t padded = core::padded_tokens(lengths, packs.run);
  lens.clear();
  for (size_t i : packs.keep) lens.push_back(static_cast<int>(lengths[i]));
  return padded;
}

}  // namespace

Dispatch parse_dispatch(const std::string& name) {
  if (name == "random") return Dispatch::kRandom;
  if (name == "skew_aware") return Dispatch::kSkewAware;
  throw InputError("unknown dispatch '" + name + "' (random, skew_aware)");
}

std::string dispatch_name(Dispatch dispatch) {
  return dispatch == Dispatch::kRandom ? "random" : "skew_aware";
}

int skew_aware_long_instances(const InstanceModel& inst, int n, const Batch& b, double alpha) {
  if (n <= 1) return 0;
  const int long_groups =
      std::clamp(static_cast<int>(std::ceil(alpha * b.groups())), 0, b.groups());
  const double p90 = quantile(b.estimate, 0.9), p50 = quantile(b.estimate, 0.5);
  const double prompt =
      std::accumulate(b.prompt_tokens.begin(), b.prompt_tokens.end(), 0.0) / b.groups();
  int best = 1;
  double best_lat = 1e300;
  for (int nl = 1; nl < n; ++nl) {
    const double lat = std::max(
        group_latency(inst, long_groups * b.group_size, p90, prompt, nl),
        group_latency(inst, (b.groups() - long_groups) * b.group_size, p50, prompt, n - nl));
    if (lat < best_lat) best_lat = lat, best = nl;
  }
  return best;
}

namespace {

// Top-alpha groups (by estimate) on instances [0, nl), the rest on [nl, n); LPT list scheduling
// inside each part. nl = 0: all groups LPT-scheduled over all instances.
std::vector<int> skew_assignment(const std::vector<int>& by_length, const Batch& b, int n, int nl,
                                 double alpha) {
  std::vector<int> inst(b.groups(), 0);
  if (nl == 0) {
    assign_lpt(by_length, b, 0, n, inst);
    return inst;
  }
  const int long_groups = std::min(b.groups(), static_cast<int>(std::ceil(alpha * b.groups())));
  std::vector<int> lg(by_length.begin(), by_length.begin() + long_groups);
  std::vector<int> rg(by_length.begin() + long_groups, by_length.end());
  assign_lpt(lg, b, 0, nl, inst);
  assign_lpt(rg, b, nl, n - nl, inst);
  return inst;
}

// Continuous batching on every instance (a core::BatchingSim each). An instance admits its
// released groups, earliest released first and then in `admission` order, while slots are free
// (one group always when idle, so an oversized group still runs) and prefills them, the prompt of
// a group once (prefix sharing). A dynamic-sampling refill (Batch::released_after) is released
// when the group it replaced completes, or with RefillRelease::kOnWave once its whole wave has.
// Instances advance in time order, each by one decode chunk (to its next completion), so a group
// released while its instance decodes a chunk is admitted at the chunk's end. Returns the end.
double run_all(const std::vector<InstanceModel>& instances, const Batch& b,
               const std::vector<int>& instance_of_group, const std::vector<int>& admission,
               double start, RefillRelease rule, std::vector<double>& finish,
               std::vector<double>& busy, TraceWriter* trace, int iteration) {
  const int n = static_cast<int>(instances.size()), groups = b.groups();
  using Key = std::pair<double, int>;  // (release time, position in admission)
  struct Instance {
    core::BatchingSim sim;
    std::priority_queue<Key, std::vector<Key>, std::greater<Key>> ready;
    double t;
  };
  std::vector<Instance> inst;
  inst.reserve(n);
  for (int i = 0; i < n; ++i) {
    inst.push_back({core::BatchingSim(instances[i].step_seconds), {}, start});
    if (trace) trace->name_track(kGenPid, "generation", i, "instance " + std::to_string(i));
  }
  std::vector<int> position(groups);
  for (int p = 0; p < groups; ++p) position[admission[p]] = p;
  auto release = [&](int g, double at) {
    inst[instance_of_group[g]].ready.emplace(at, position[g]);
  };
  // Who waits on what: a refill on the group it replaced (waiting[group]), or with kOnWave on the
  // wave before its own (waiting[wave]).
  std::vector<std::vector<int>> waiting(groups);
  std::vector<int> wave(groups, 0), wave_left;
  std::vector<double> wave_end;
  for (int g = 0; g < groups; ++g) {
    const int after = b.released_after.empty() ? -1 : b.released_after[g];
    if (after < 0) {
      release(g, start);
      continue;
    }
    wave[g] = b.wave(g);
    waiting[rule == RefillRelease::kOnWave ? wave[g] - 1 : after].push_back(g);
  }
  if (rule == RefillRelease::kOnWave) {
    const int waves = 1 + *std::max_element(wave.begin(), wave.end());
    wave_left.assign(waves, 0);
    wave_end.assign(waves, start);
    for (int g = 0; g < groups; ++g) wave_left[wave[g]] += 1;
  }
  std::vector<int> left(groups, b.group_size);  // samples of each group still decoding
  auto group_done = [&](int g, double t) {
    if (rule == RefillRelease::kOnGroup) {
      for (int d : waiting[g]) release(d, t);
      return;
    }
    const int w = wave[g];
    wave_end[w] = std::max(wave_end[w], t);
    if (--wave_left[w] == 0) {
      for (int d : waiting[w]) release(d, wave_end[w]);
    }
  };
  auto admit = [&](int i) {
    Instance& x = inst[i];
    const InstanceModel& model = instances[i];
    double prefill = 0;
    while (!x.ready.empty() && x.ready.top().first <= x.t &&
           (x.sim.running() == 0 || x.sim.running() + b.group_size <= model.max_batch)) {
      const int g = admission[x.ready.top().second];
      x.ready.pop();
      prefill += b.prompt_tokens[g];
      for (int j = 0; j < b.group_size; ++j) {
        const int s = g * b.group_size + j;
        x.sim.admit(s, b.output_tokens[s], b.prompt_tokens[g]);
      }
    }
    if (prefill > 0 && model.prefill_tokens_per_s > 0) {
      const double dt = prefill / model.prefill_tokens_per_s;
      if (trace) trace->span(kGenPid, i, "prefill", x.t, dt, {{"iteration", iteration}});
      x.t += dt;
      busy[i] += dt;
    }
  };
  // Events in time order: an idle instance admits at its next release; a running one decodes to
  // its next completion, or only up to the step where a group released meanwhile can join it.
  const double inf = std::numeric_limits<double>::infinity();
  while (true) {
    int i = -1;
    double now = inf;
    for (int k = 0; k < n; ++k) {
      admit(k);
      const Instance& x = inst[k];
      const double release = x.ready.empty() ? inf : x.ready.top().first;
      double next = std::max(x.t, release);
      if (x.sim.running() > 0) {
        const bool room = x.sim.running() + b.group_size <= instances[k].max_batch;
        next = x.t + x.sim.next_chunk().second;
        if (room && release < next) next = release;
      }
      if (next < now) now = next, i = k;
    }
    if (i < 0) break;
    Instance& x = inst[i];
    if (x.sim.running() == 0) {
      x.t = now;  // admits at the top of the next round
      continue;
    }
    // A release before the next completion: decode to the first step boundary at or after it
    // (whole steps at this chunk's pace).
    const auto [to_completion, seconds] = x.sim.next_chunk();
    const double steps = now < x.t + seconds ? std::ceil((now - x.t) * to_completion / seconds)
                                             : core::BatchingSim::kAll;
    const core::BatchingSim::Chunk& c = x.sim.decode(steps);
    if (trace) {
      trace->span(
          kGenPid, i, "decode", x.t, c.seconds,
          {{"iteration", iteration}, {"batch", c.batch}, {"steps", static_cast<int>(c.steps)}});
    }
    x.t += c.seconds;
    busy[i] += c.seconds;
    for (int s : c.finished) {
      finish[s] = x.t;
      if (--left[s / b.group_size] == 0) group_done(s / b.group_size, x.t);
    }
  }
  return *std::max_element(finish.begin(), finish.end());
}

}  // namespace

int choose_long_instances(const std::vector<InstanceModel>& instances, const Batch& b,
                          double alpha) {
  const int n = static_cast<int>(instances.size());
  if (n <= 1) return 0;
  std::vector<int> by_length(b.groups());
  std::iota(by_length.begin(), by_length.end(), 0);
  std::stable_sort(by_length.begin(), by_length.end(),
                   [&](int x, int y) { return b.estimate[x] > b.estimate[y]; });
  const int long_groups = std::min(b.groups(), static_cast<int>(std::ceil(alpha * b.groups())));
  double head = 0, total = 0;
  for (int i = 0; i < b.groups(); ++i) {
    total += b.estimate[by_length[i]];
    if (i < long_groups) head += b.estimate[by_length[i]];
  }
  const int share =
      std::clamp(static_cast<int>(std::lround(n * head / std::max(1e-9, total))), 1, n - 1);
  const int eq2 = skew_aware_long_instances(instances.front(), n, b, alpha);
  if (share == eq2) return share;
  // The batch as the dispatcher sees it: every sample as long as its group's estimate.
  Batch predicted = b;
  for (int s = 0; s < b.samples(); ++s) {
    predicted.output_tokens[s] =
        std::max(1, static_cast<int>(std::lround(b.estimate[s / b.group_size])));
  }
  std::vector<double> finish(b.samples()), busy(n);
  auto end = [&](int nl) {
    std::fill(busy.begin(), busy.end(), 0.0);
    return run_all(instances, predicted, skew_assignment(by_length, b, n, nl, alpha), by_length, 0,
                   RefillRelease::kOnGroup, finish, busy, nullptr, 0);
  };
  return end(eq2) < end(share) ? eq2 : share;
}

GenerationResult simulate_generation(const std::vector<InstanceModel>& instances, const Batch& b,
                                     Dispatch dispatch, double start, double alpha, uint64_t seed,
                                     TraceWriter* trace, int iteration, RefillRelease release) {
  b.check();
  const int n = static_cast<int>(instances.size());
  if (n == 0) throw InputError("generation needs at least one instance");
  GenerationResult r;
  r.finish.assign(b.samples(), start);
  r.busy.assign(n, 0);
  std::vector<int> admission(b.groups());
  std::iota(admission.begin(), admission.end(), 0);
  if (dispatch == Dispatch::kRandom) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> pick(0, n - 1);
    r.instance_of_group.resize(b.groups());
    for (int g = 0; g < b.groups(); ++g) r.instance_of_group[g] = pick(rng);
  } else {
    std::stable_sort(admission.begin(), admission.end(),
                     [&](int x, int y) { return b.estimate[x] > b.estimate[y]; });
    r.instance_of_group =
        skew_assignment(admission, b, n, choose_long_instances(instances, b, alpha), alpha);
  }
  r.end = run_all(instances, b, r.instance_of_group, admission, start, release, r.finish, r.busy,
                  trace, iteration);
  return r;
}

EmulatorResult emulate(const EmulatorInput& in) {
  if (in.batches.empty()) throw InputError("emulator needs at least one batch");
  if (!(in.trainer.tokens_per_s > 0)) throw InputError("trainer tokens_per_s must be positive");
  EmulatorResult out;
  TraceWriter* trace = in.trace ? &out.trace : nullptr;
  if (trace) {
    trace->name_track(kTrainPid, "trainer", 0, "trainer");
    trace->name_track(kTrainPid, "trainer", 1, "weight transfer");
  }
  const core::ModeTraits mode = core::traits(in.mode);
  const bool streaming = mode.on_arrival;
  const double wu = mode.dedicated_generator ? in.weight_update_s : 0;
  double trainer_free = 0, gen_busy = 0, train_busy = 0;
  int64_t samples = 0;
  auto& its = out.iterations;
  for (size_t k = 0; k < in.batches.size(); ++k) {
    const Batch& b = in.batches[k];
    IterationTiming it;
    if (k > 0) {
      if (mode.iterations_ahead > 0) {
        // Weights k-1 (made by training batch k-2) must be installed: staleness at most one.
        it.gen_start = std::max(its[k - 1].gen_end, k >= 2 ? its[k - 2].weights_ready : 0.0);
      } else {
        it.gen_start = its[k - 1].weights_ready;
      }
    }
    GenerationResult g = simulate_generation(
        in.instances, b, in.dispatch, it.gen_start, in.long_tail_fraction, in.seed + k, trace,
        static_cast<int>(k), streaming ? RefillRelease::kOnGroup : RefillRelease::kOnWave);
    it.gen_end = g.end;
    for (double s : g.busy) gen_busy += s;
    samples += b.samples();

    // Groups join the trainer's buffer when their last sample is done (advantages need them all).
    std::vector<std::pair<double, int>> done;  // (completion, group)
    for (int grp = 0; grp < b.groups(); ++grp) {
      double c = 0;
      for (int i = 0; i < b.group_size; ++i) c = std::max(c, g.finish[grp * b.group_size + i]);
      done.emplace_back(streaming ? c : g.end, grp);
    }
    std::sort(done.begin(), done.end());
    const int64_t budget = streaming && in.trainer.micro_batch_tokens > 0
                               ? in.trainer.micro_batch_tokens
                               : std::numeric_limits<int64_t>::max();
    const bool padded = in.trainer.padded && in.trainer.micro_batch_tokens > 0;
    double t = std::max(trainer_free, mode.dedicated_generator ? 0.0 : g.end);
    const double iteration_start = t;
    int64_t buf_tokens = 0;
    int buf_samples = 0;
    std::vector<int> buf_lens;  // sequence lengths buffered (padded trainer model)
    it.train_start = -1;
    for (size_t i = 0; i < done.size(); ++i) {
      const int grp = done[i].second;
      if (b.trained(grp)) {
        for (int j = 0; j < b.group_size; ++j) {
          const int len = b.prompt_tokens[grp] + b.output_tokens[grp * b.group_size + j];
          buf_tokens += len;
          buf_lens.push_back(len);
        }
        buf_samples += b.group_size;
      }
      const bool last = i + 1 == done.size();
      // Groups that completed before the trainer got to this iteration (async: generated while
      // the previous one trained) are handed to it at once, as one pool to pack.
      if (!last && (buf_tokens < budget || done[i + 1].first <= iteration_start)) continue;
      if (buf_samples == 0) continue;  // only skipped groups so far
      int64_t charged = buf_tokens;
      int charged_samples = buf_samples;
      if (padded) {
        // As the trainer: full micro-batches now, a partly filled last one waits for more.
        charged = pack_padded(buf_lens, in.trainer.micro_batch_tokens, !last);
        const int kept = static_cast<int>(buf_lens.size());
        charged_samples = buf_samples - kept;
        buf_tokens = 0;
        for (int l : buf_lens) buf_tokens += l;
        buf_samples = kept;
      } else {
        buf_tokens = 0;
        buf_samples = 0;
      }
      if (charged_samples == 0) continue;
      const double st = std::max(t, done[i].first);
      const double dur = in.trainer.seconds(charged, charged_samples);
      if (it.train_start < 0) it.train_start = st;
      if (trace) {
        trace->span(kTrainPid, 0, "train micro-batch", st, dur,
                    {{"iteration", k}, {"tokens", charged}, {"samples", charged_samples}});
      }
      t = st + dur;
      train_busy += dur;
      it.train_busy += dur;
    }
    if (trace)
      trace->span(kTrainPid, 0, "optimizer step", t, in.trainer.step_overhead_s,
                  {{"iteration", k}});
    t += in.trainer.step_overhead_s;
    train_busy += in.trainer.step_overhead_s;
    it.train_busy += in.trainer.step_overhead_s;
    it.train_end = t;
    trainer_free = t;
    const double push_start = std::max(t, k > 0 ? its[k - 1].weights_ready : 0.0);
    it.weights_ready = push_start + wu;
    if (trace && wu > 0) {
      trace->span(kTrainPid, 1, "weight transfer", push_start, wu, {{"version", k + 1}});
    }
    its.push_back(it);
  }
  const double last_train = its.back().train_end;
  // Synchronous modes cannot start the next iteration before the weights land, so the last push
  // belongs to the iteration; in async it overlaps the next one.
  out.makespan = mode.iterations_ahead > 0 ? last_train : its.back().weights_ready;
  const double n = static_cast<double>(its.size());
  out.iteration_seconds = out.makespan / n;
  out.steady_iteration_seconds =
      its.size() > 1 ? (last_train - its.front().train_end) / (n - 1) : out.makespan;
  out.samples_per_s = samples / out.makespan;
  double gen_total = 0;
  for (const auto& it : its) gen_total += it.gen_end - it.gen_start;
  out.gen_seconds = gen_total / n;
  out.train_seconds = train_busy / n;
  out.gen_idle_fraction = 1 - gen_busy / (in.instances.size() * out.makespan);
  out.train_idle_fraction = 1 - train_busy / out.makespan;
  return out;
}

// The summary figures (not the per-iteration timings or the trace).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(EmulatorResult, iteration_seconds, steady_iteration_seconds,
                                   samples_per_s, gen_seconds, train_seconds, gen_idle_fraction,
                                   train_idle_fraction, makespan)

nlohmann::json EmulatorResult::to_json() const { return *this; }

}  // namespace streamrl::planner
