// Dispatching one generation batch over N SGS instances (StreamRL §5.3): which
// instance serves each request, in what admission order, and how many samples run at once there.
// Pure functions of (requests with length estimates, PTL profile, length distribution), so every
// decision is unit-testable without an engine.
//
// Policies:
//   random        Random-FIFO baseline: a seeded shuffle dealt round-robin (equal request counts),
//                 arrival order inside each instance, the large batch size everywhere.
//   least_loaded  arrival order, each request to the instance with the least estimated tokens.
//   skew_aware    Algorithm 2: the top alpha predicted-longest requests form the long-tail group on
//                 N_l instances, the rest go to N_r = N - N_l instances, LPT admission order inside
//                 each instance. (N_l, N_r) and each group's batch size minimise a latency model:
//                   eq2     the paper's: Eq. 2 with group lengths P90/P50 of the rolling length
//                           distribution, alpha fixed (0.2 in the paper);
//                   replay  (default) each instance's continuous batching replayed on the PTL
//                           profile over the estimates calibrated to that distribution; it also
//                           picks alpha from a grid ("auto", the default), 0 included.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "streamrl/core/ptl_table.h"
#include "streamrl/engine/engine.h"
#include "streamrl/engine/profile.h"

namespace streamrl::sgs {

enum class DispatchPolicy { kRandom, kLeastLoaded, kSkewAware };
enum class LatencyModel { kEq2, kReplay };
enum class SplitObjective {
  kMax,  // wall-clock of the two groups running side by side (default)
  kSum,  // Algorithm 2 as printed: the two groups' latencies added
};

// "random" / "least_loaded" / "skew_aware"; "max" / "sum"; "eq2" / "replay". Throw InputError
// otherwise.
DispatchPolicy parse_dispatch_policy(const std::string& name);
SplitObjective parse_split_objective(const std::string& name);
LatencyModel parse_latency_model(const std::string& name);
std::string to_string(DispatchPolicy policy);

// One request as the dispatcher sees it.
struct DispatchItem {
  double estimate = 0;  // predicted output length in tokens (ranker or oracle)
  int n = 1;            // samples of the request; they stay on one instance (prefix sharing)
  int prompt_len = 0;   // tokens, for the context the latency model looks up
};

struct DispatchConfig {
  DispatchPolicy policy = DispatchPolicy::kSkewAware;
  double alpha = 0.2;      // long-tail fraction of requests (skew_aware) unless auto_alpha
  bool auto_alpha = true;  // replay model: search alpha over a grid instead
  LatencyModel latency_model = LatencyModel::kReplay;
  SplitObjective objective = SplitObjective::kMax;  // eq2 model; replay minimises the max
  int max_batch_size = 64;  // the "large" batch: most samples one instance runs at once
  // Admission order inside an instance; default LPT for skew_aware, FIFO otherwise.
  std::optional<engine::AdmissionPolicy> admission;
  uint64_t seed = 0;  // random policy
};

// P50/P90 of recent output lengths (the distribution D of Algorithm 2), over a bounded window.
class LengthWindow {
 public:
  explicit LengthWindow(size_t capacity = 4096) : capacity_(capacity) {}
  void add(double length);
  size_t size() const { return lengths_.size(); }
  double percentile(double q) const;   // InputError when empty
  std::vector<double> sorted() const;  // ascending, for several percentiles at once

 private:
  size_t capacity_;
  std::deque<double> lengths_;
};

struct InstancePlan {
  std::vector<size_t> order;  // indices into the items, in admission order
  int batch_size = 0;         // samples running at once on this instance
};

struct Assignment {
  std::vector<InstancePlan> instances;  // one per instance
  // skew_aware only: instances [0, long_instances) serve the long-tail group.
  int long_instances = 0;
  size_t long_items = 0;
  double predicted_seconds = 0;  // the latency model's value of the chosen split (skew_aware)
};

// Eq. 2 on one instance: PTL(batch) x length x ceil(samples / batch). 0 for no samples.
double eq2_latency(const core::PtlTable& ptl, int samples, double length, int batch, int context);

// The best batch size (1..max_batch) for `samples` samples spread evenly over `instances`
// instances, and its Eq. 2 latency. Infinite latency when samples > 0 and instances == 0.
struct GroupLatency {
  double seconds = 0;
  int batch_size = 0;
};
GroupLatency group_latency(const core::PtlTable& ptl, int samples, double length, int instances,
                           int max_batch, int context);

// One group of Algorithm 2: its samples, the length assumed for all of them (P90 or P50), and the
// context (prompt + half the output) at which PTL is looked up.
struct GroupSpec {
  int samples = 0;
  double length = 0;
  int context = 0;
};

// Algorithm 2's search over N_l + N_r = n (n >= 1): an empty group gets no instance; otherwise
// 1 <= N_l < n, ties on the objective going to the smaller sum, then to the smaller N_l. Throws
// InputError when n == 1 and both groups are non-empty.
struct SplitChoice {
  int long_instances = 0, regular_instances = 0;
  int long_batch = 0, regular_batch = 0;
  double long_seconds = 0, regular_seconds = 0;
  double seconds = 0;  // objective value
};
SplitChoice choose_split(const core::PtlTable& ptl, const GroupSpec& long_group,
                         const GroupSpec& regular_group, int n, int max_batch,
                         SplitObjective objective);

// The three above on `profile`'s table, built for each call: in a search, build it once with
// table() and call the overloads above.
double eq2_latency(const engine::Profile& profile, int samples, double length, int batch,
                   int context);
GroupLatency group_latency(const engine::Profile& profile, int samples, double length,
                           int instances, int max_batch, int context);
SplitChoice choose_split(const engine::Profile& profile, const GroupSpec& long_group,
                         const GroupSpec& regular_group, int n, int max_batch,
                         SplitObjective objective);

// Indices sorted by estimate, longest first (stable: equal estimates keep index order).
std::vector<size_t> lpt_order(const std::vector<DispatchItem>& items, std::vector<size_t> indices);

// The replay model's seconds for `plan` on the estimates in `items`: each instance's requests in
// its admission order at its batch size, the slowest instance. Given true lengths as estimates,
// what a plan would take by the model that skew-aware dispatch values its candidates with.
double replay_assignment(const core::PtlTable& ptl, const std::vector<DispatchItem>& items,
                         const Assignment& plan);

// The assignment of `items` over `instances` (>= 1) instances. skew_aware needs `profile` and a
// non-empty `lengths`; other policies ignore both. Throws InputError on bad arguments.
Assignment dispatch(const std::vector<DispatchItem>& items, int instances,
                    const DispatchConfig& config, const engine::Profile* profile = nullptr,
                    const LengthWindow* lengths = nullptr);

}  // namespace streamrl::sgs
