#include "streamrl/sgs/dispatch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "streamrl/core/errors.h"
#include "streamrl/core/stats.h"
#include "streamrl/sgs/replay.h"

namespace streamrl::sgs {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

int total_samples(const std::vector<DispatchItem>& items, const std::vector<size_t>& idx) {
  int s = 0;
  for (size_t i : idx) s += items[i].n;
  return s;
}

int mean_prompt_len(const std::vector<DispatchItem>& items, const std::vector<size_t>& idx) {
  if (idx.empty()) return 0;
  double s = 0;
  for (size_t i : idx) s += items[i].prompt_len;
  return static_cast<int>(std::lround(s / static_cast<double>(idx.size())));
}

// Greedy LPT over instances (Graham): longest estimate first, each to the instance with the least
// estimated tokens so far; ties go to the lower instance.
std::vector<std::vector<size_t>> spread_lpt(const std::vector<DispatchItem>& items,
                                            const std::vector<size_t>& sorted, int instances) {
  std::vector<std::vector<size_t>> out(instances);
  std::vector<double> load(instances, 0.0);
  for (size_t i : sorted) {
    const int k = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    out[k].push_back(i);
    load[k] += items[i].estimate * items[i].n;
  }
  return out;
}

InstancePlan make_plan(const std::vector<DispatchItem>& items, std::vector<size_t> members,
                       engine::AdmissionPolicy admission, int batch) {
  InstancePlan p;
  if (admission == engine::AdmissionPolicy::kLongestFirst) {
    p.order = lpt_order(items, std::move(members));
  } else {
    std::sort(members.begin(), members.end());
    p.order = std::move(members);
  }
  // A request's samples are admitted together, so the batch must hold the largest group.
  for (size_t i : p.order) batch = std::max(batch, items[i].n);
  p.batch_size = batch;
  return p;
}

// Long-tail fractions the replay model tries when alpha is auto.
constexpr double kAlphaGrid[] = {0.0,  0.01, 0.02,  0.03, 0.04, 0.05, 0.06, 0.07, 0.08,
                                 0.09, 0.10, 0.125, 0.15, 0.2,  0.25, 0.3,  0.4,  0.5};

// Every sample of `members`, in their order: each request's n samples at its estimate.
std::vector<double> member_lengths(const std::vector<DispatchItem>& items,
                                   const std::vector<size_t>& members) {
  std::vector<double> lengths;
  for (size_t i : members) lengths.insert(lengths.end(), items[i].n, items[i].estimate);
  return lengths;
}

// The best batch size for one instance's members (in LPT order) and its replayed seconds.
GroupLatency replay_members(const core::PtlTable& ptl, const std::vector<DispatchItem>& items,
                            const std::vector<size_t>& members, int max_batch) {
  if (members.empty()) return {0.0, max_batch};
  const std::vector<double> lengths = member_lengths(items, members);
  const int prompt = mean_prompt_len(items, members);
  GroupLatency best{kInf, max_batch};
  for (int bs = 1;; bs = std::min(2 * bs, max_batch)) {
    const double s = replay_instance(ptl, lengths, bs, prompt);
    if (s < best.seconds) best = {s, bs};
    if (bs == max_batch || bs >= static_cast<int>(lengths.size())) break;
  }
  return best;
}

struct GroupPlan {
  std::vector<std::vector<size_t>> members;  // per instance, LPT order
  std::vector<int> batch;
  double seconds = 0;  // slowest instance
};

GroupPlan replay_group(const core::PtlTable& ptl, const std::vector<DispatchItem>& items,
                       const std::vector<size_t>& sorted, int instances, int max_batch) {
  GroupPlan g;
  g.members = spread_lpt(items, sorted, instances);
  for (const auto& m : g.members) {
    const GroupLatency l = replay_members(ptl, items, m, max_batch);
    g.batch.push_back(l.batch_size);
    g.seconds = std::max(g.seconds, l.seconds);
  }
  return g;
}

// Algorithm 2 with the replay model over `items` whose estimates are already calibrated: every
// candidate cut (one when alpha is fixed) and N_l; the split whose slowest instance ends first,
// ties to the smaller cut. Fills `a` and the members and batch sizes.
void replay_split(const core::PtlTable& ptl, const std::vector<DispatchItem>& items,
                  const std::vector<size_t>& sorted, int instances, const DispatchConfig& config,
                  Assignment& a, std::vector<std::vector<size_t>>& members,
                  std::vector<int>& batch) {
  std::vector<size_t> cuts;
  auto add_cut = [&](double alpha) {
    const size_t m = static_cast<size_t>(std::floor(alpha * sorted.size() + 1e-9));
    if (std::find(cuts.begin(), cuts.end(), m) == cuts.end()) cuts.push_back(m);
  };
  if (config.auto_alpha) {
    for (double f : kAlphaGrid) add_cut(f);
  } else {
    add_cut(config.alpha);
  }
  double best = kInf;
  for (size_t m : cuts) {
    const std::vector<size_t> tail(sorted.begin(), sorted.begin() + m);
    const std::vector<size_t> rest(sorted.begin() + m, sorted.end());
    // An empty group gets no instance; otherwise both groups need at least one.
    int lo = 1, hi = instances - 1;
    if (tail.empty()) lo = hi = 0;
    if (rest.empty()) lo = hi = instances;
    for (int nl = lo; nl <= hi; ++nl) {
      GroupPlan lp = replay_group(ptl, items, tail, nl, config.max_batch_size);
      GroupPlan rp = replay_group(ptl, items, rest, instances - nl, config.max_batch_size);
      const double s = std::max(lp.seconds, rp.seconds);
      if (!(s < best)) continue;
      best = s;
      a.long_instances = nl;
      a.long_items = m;
      a.predicted_seconds = s;
      for (int k = 0; k < nl; ++k) {
        members[k] = lp.members[k];
        batch[k] = lp.batch[k];
      }
      for (int k = nl; k < instances; ++k) {
        members[k] = rp.members[k - nl];
        batch[k] = rp.batch[k - nl];
      }
    }
  }
}

}  // namespace

DispatchPolicy parse_dispatch_policy(const std::string& name) {
  if (name == "random") return DispatchPolicy::kRandom;
  if (name == "least_loaded") return DispatchPolicy::kLeastLoaded;
  if (name == "skew_aware") return DispatchPolicy::kSkewAware;
  throw InputError("unknown dispatch policy '" + name +
                   "' (known: random, least_loaded, skew_aware)");
}

SplitObjective parse_split_objective(const std::string& name) {
  if (name == "max") return SplitObjective::kMax;
  if (name == "sum") return SplitObjective::kSum;
  throw InputError("unknown split objective '" + name + "' (known: max, sum)");
}

LatencyModel parse_latency_model(const std::string& name) {
  if (name == "eq2") return LatencyModel::kEq2;
  if (name == "replay") return LatencyModel::kReplay;
  throw InputError("unknown latency model '" + name + "' (known: eq2, replay)");
}

std::string to_string(DispatchPolicy policy) {
  switch (policy) {
    case DispatchPolicy::kRandom:
      return "random";
    case DispatchPolicy::kLeastLoaded:
      return "least_loaded";
    case DispatchPolicy::kSkewAware:
      return "skew_aware";
  }
  return "?";
}

void LengthWindow::add(double length) {
  lengths_.push_back(length);
  while (lengths_.size() > capacity_) lengths_.pop_front();
}

double LengthWindow::percentile(double q) const {
  if (lengths_.empty()) throw InputError("length window is empty: no observed output lengths yet");
  return core::percentile_of_sorted(sorted(), q);
}

std::vector<double> LengthWindow::sorted() const {
  std::vector<double> v(lengths_.begin(), lengths_.end());
  std::sort(v.begin(), v.end());
  return v;
}

double eq2_latency(const core::PtlTable& ptl, int samples, double length, int batch, int context) {
  if (samples <= 0) return 0.0;
  const int rounds = (samples + batch - 1) / batch;
  return ptl.step_seconds(batch, context) * length * rounds;
}

double eq2_latency(const engine::Profile& profile, int samples, double length, int batch,
                   int context) {
  return eq2_latency(profile.table(), samples, length, batch, context);
}

GroupLatency group_latency(const core::PtlTable& ptl, int samples, double length, int instances,
                           int max_batch, int context) {
  if (samples <= 0) return {0.0, max_batch};
  if (instances <= 0) return {kInf, 0};
  const int per_instance = (samples + instances - 1) / instances;
  GroupLatency best{kInf, 0};
  for (int bs = 1; bs <= std::min(per_instance, max_batch); ++bs) {
    const double s = eq2_latency(ptl, per_instance, length, bs, context);
    if (s < best.seconds) best = {s, bs};
  }
  return best;
}

GroupLatency group_latency(const engine::Profile& profile, int samples, double length,
                           int instances, int max_batch, int context) {
  return group_latency(profile.table(), samples, length, instances, max_batch, context);
}

SplitChoice choose_split(const core::PtlTable& ptl, const GroupSpec& long_group,
                         const GroupSpec& regular_group, int n, int max_batch,
                         SplitObjective objective) {
  if (n < 1 || max_batch < 1) throw InputError("choose_split: need n >= 1 and max_batch >= 1");
  auto evaluate = [&](int nl) {
    const GroupLatency l = group_latency(ptl, long_group.samples, long_group.length, nl, max_batch,
                                         long_group.context);
    const GroupLatency r = group_latency(ptl, regular_group.samples, regular_group.length, n - nl,
                                         max_batch, regular_group.context);
    const double total =
        objective == SplitObjective::kMax ? std::max(l.seconds, r.seconds) : l.seconds + r.seconds;
    return SplitChoice{nl, n - nl, l.batch_size, r.batch_size, l.seconds, r.seconds, total};
  };
  // A group with no samples gets no instance: idle instances help nobody.
  if (long_group.samples <= 0) return evaluate(0);
  if (regular_group.samples <= 0) return evaluate(n);
  if (n < 2) {
    throw InputError("choose_split: " + std::to_string(n) +
                     " instance cannot serve both a long-tail and a regular group");
  }
  // Ties on the objective go to the smaller sum (less total work), then to the smaller N_l.
  SplitChoice best = evaluate(1);
  for (int nl = 2; nl < n; ++nl) {
    const SplitChoice c = evaluate(nl);
    const double c_sum = c.long_seconds + c.regular_seconds;
    const double b_sum = best.long_seconds + best.regular_seconds;
    if (c.seconds < best.seconds || (c.seconds == best.seconds && c_sum < b_sum)) best = c;
  }
  return best;
}

SplitChoice choose_split(const engine::Profile& profile, const GroupSpec& long_group,
                         const GroupSpec& regular_group, int n, int max_batch,
                         SplitObjective objective) {
  return choose_split(profile.table(), long_group, regular_group, n, max_batch, objective);
}

std::vector<size_t> lpt_order(const std::vector<DispatchItem>& items, std::vector<size_t> indices) {
  std::stable_sort(indices.begin(), indices.end(),
                   [&](size_t a, size_t b) { return items[a].estimate > items[b].estimate; });
  return indices;
}

double replay_assignment(const core::PtlTable& ptl, const std::vector<DispatchItem>& items,
                         const Assignment& plan) {
  double slowest = 0;
  for (const InstancePlan& inst : plan.instances) {
    if (inst.order.empty()) continue;
    slowest =
        std::max(slowest, replay_instance(ptl, member_lengths(items, inst.order), inst.batch_size,
                                          mean_prompt_len(items, inst.order)));
  }
  return slowest;
}

Assignment dispatch(const std::vector<DispatchItem>& items, int instances,
                    const DispatchConfig& config, const engine::Profile* profile,
                    const LengthWindow* lengths) {
  if (instances < 1) throw InputError("dispatch: need at least one instance");
  if (config.max_batch_size < 1) throw InputError("dispatch: max_batch_size must be >= 1");
  if (!(config.alpha >= 0.0 && config.alpha <= 1.0)) {
    throw InputError("dispatch: alpha must be in [0, 1]");
  }
  for (const auto& it : items) {
    if (it.n < 1 || !std::isfinite(it.estimate)) {
      throw InputError("dispatch: every request needs n >= 1 and a finite length estimate");
    }
  }
  const bool skew = config.policy == DispatchPolicy::kSkewAware;
  const engine::AdmissionPolicy admission = config.admission.value_or(
      skew ? engine::AdmissionPolicy::kLongestFirst : engine::AdmissionPolicy::kFifo);
  std::vector<size_t> all(items.size());
  std::iota(all.begin(), all.end(), 0);

  Assignment a;
  std::vector<std::vector<size_t>> members(instances);
  std::vector<int> batch(instances, config.max_batch_size);
  switch (config.policy) {
    case DispatchPolicy::kRandom: {
      std::mt19937_64 rng(config.seed);
      std::shuffle(all.begin(), all.end(), rng);
      for (size_t k = 0; k < all.size(); ++k) members[k % instances].push_back(all[k]);
      break;
    }
    case DispatchPolicy::kLeastLoaded: {
      std::vector<double> load(instances, 0.0);
      for (size_t i : all) {
        const int k = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
        members[k].push_back(i);
        load[k] += items[i].estimate * items[i].n;
      }
      break;
    }
    case DispatchPolicy::kSkewAware: {
      if (!profile || !lengths || lengths->size() == 0) {
        throw InputError("skew_aware dispatch needs a PTL profile and observed output lengths");
      }
      if (config.auto_alpha && config.latency_model != LatencyModel::kReplay) {
        throw InputError("dispatch: alpha auto needs the replay latency model");
      }
      const std::vector<size_t> sorted = lpt_order(items, all);
      if (instances == 1) {
        // One instance cannot be split: it serves both groups, longest first.
        members[0] = sorted;
        break;
      }
      const core::PtlTable ptl = profile->table();  // once: the searches below query it often
      if (config.latency_model == LatencyModel::kReplay) {
        std::vector<double> raw;
        for (const auto& it : items) raw.push_back(it.estimate);
        const std::vector<double> cal = calibrate_to_quantiles(raw, *lengths);
        std::vector<DispatchItem> calibrated = items;
        for (size_t i = 0; i < items.size(); ++i) calibrated[i].estimate = cal[i];
        replay_split(ptl, calibrated, sorted, instances, config, a, members, batch);
        break;
      }
      const size_t m = static_cast<size_t>(std::floor(config.alpha * sorted.size() + 1e-9));
      const std::vector<size_t> tail(sorted.begin(), sorted.begin() + m);
      const std::vector<size_t> rest(sorted.begin() + m, sorted.end());
      a.long_items = m;
      const double p90 = lengths->percentile(0.9), p50 = lengths->percentile(0.5);
      const GroupSpec lg{total_samples(items, tail), p90,
                         mean_prompt_len(items, tail) + static_cast<int>(p90 / 2)};
      const GroupSpec rg{total_samples(items, rest), p50,
                         mean_prompt_len(items, rest) + static_cast<int>(p50 / 2)};
      const SplitChoice c =
          choose_split(ptl, lg, rg, instances, config.max_batch_size, config.objective);
      a.long_instances = c.long_instances;
      a.predicted_seconds = c.seconds;
      auto lp = spread_lpt(items, tail, c.long_instances);
      auto rp = spread_lpt(items, rest, c.regular_instances);
      for (int k = 0; k < c.long_instances; ++k) {
        members[k] = std::move(lp[k]);
        batch[k] = c.long_batch;
      }
      for (int k = 0; k < c.regular_instances; ++k) {
        members[c.long_instances + k] = std::move(rp[k]);
        batch[c.long_instances + k] = c.regular_batch;
      }
      break;
    }
  }
  for (int k = 0; k < instances; ++k) {
    a.instances.push_back(make_plan(items, std::move(members[k]), admission, batch[k]));
  }
  return a;
}

}  // namespace streamrl::sgs
