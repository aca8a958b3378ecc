#include "streamrl/planner/link_sim.h"

#include <algorithm>
#include <limits>
#include <map>

#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

// The rank's work in program order: compute runs one piece at a time; submissions are instant; a
// wait blocks compute until an all-to-all has landed.
struct Step {
  enum Kind { kCompute, kAllReduce, kAllToAll, kWait } kind;
  double seconds = 0;
  bool combine = false;
  int tensor = 0;
  int64_t bytes = 0, tokens = 0;
};

std::vector<Step> program(const std::vector<BackwardLayer>& layers) {
  std::vector<Step> steps;
  int tensor = 0;
  for (const BackwardLayer& l : layers) {
    if (l.moe) {
      steps.push_back({Step::kCompute, l.combine_s, true});
      const int first = tensor++;
      steps.push_back({Step::kAllToAll, 0, false, first, l.bytes_per_token, l.tokens});
      steps.push_back({Step::kWait, 0, false, first});
      steps.push_back({Step::kCompute, l.expert_s});
      steps.push_back({Step::kAllReduce, 0, false, tensor++, l.expert_gradient_bytes});
      const int second = tensor++;
      steps.push_back({Step::kAllToAll, 0, false, second, l.bytes_per_token, l.tokens});
      steps.push_back({Step::kWait, 0, false, second});
    }
    steps.push_back({Step::kCompute, l.compute_s});
    steps.push_back({Step::kAllReduce, 0, false, tensor++, l.gradient_bytes});
  }
  return steps;
}

struct InFlight {
  ep::MicroOp op;
  double remaining;  // bytes, the launch latency counted as bytes at full rate
};

}  // namespace

LinkSimResult simulate_backward(const std::vector<BackwardLayer>& layers, const Link& link,
                                const ep::SchedulerOptions& options) {
  if (link.bytes_per_s <= 0) throw InputError("link bandwidth must be > 0");
  ep::CommScheduler scheduler(options);
  const std::vector<Step> steps = program(layers);
  std::map<int, int> chunks_left;      // per all-to-all tensor
  std::map<int, double> submitted_at;  // per all-to-all tensor
  std::vector<InFlight> flying;
  LinkSimResult r;
  double t = 0, compute_left = 0;
  size_t next = 0;
  bool computing = false;
  for (;;) {
    // Run the program up to the next compute or unmet wait.
    while (!computing && next < steps.size()) {
      const Step& s = steps[next];
      if (s.kind == Step::kWait && chunks_left[s.tensor] > 0) break;
      ++next;
      if (s.kind == Step::kCompute) {
        computing = s.seconds > 0, compute_left = s.seconds;
        scheduler.set_combine_running(computing && s.combine);
      } else if (s.kind == Step::kAllReduce && s.bytes > 0) {
        scheduler.submit_all_reduce(s.tensor, s.bytes);
      } else if (s.kind == Step::kAllToAll && s.tokens > 0) {
        chunks_left[s.tensor] = scheduler.submit_all_to_all(s.tensor, s.tokens, s.bytes);
        submitted_at[s.tensor] = t;
        r.all_to_all_alone_s +=
            chunks_left[s.tensor] * link.op_latency_s + s.tokens * s.bytes / link.bytes_per_s;
      }
    }
    for (const ep::MicroOp& op : scheduler.launch()) {
      flying.push_back({op, op.bytes + link.op_latency_s * link.bytes_per_s});
    }
    if (!computing && flying.empty()) {
      if (next < steps.size()) throw RuntimeFailure("link simulation stalled");
      break;
    }
    // Advance to the next event: the compute piece ends or an op in flight lands.
    const double rate = flying.empty() ? 0 : link.bytes_per_s / flying.size();
    double dt = computing ? compute_left : std::numeric_limits<double>::infinity();
    for (const InFlight& f : flying) dt = std::min(dt, f.remaining / rate);
    t += dt;
    if (computing && (compute_left -= dt) <= 1e-15) {
      computing = false;
      scheduler.set_combine_running(false);
      r.compute_end_s = t;
    }
    for (size_t i = 0; i < flying.size();) {
      if ((flying[i].remaining -= dt * rate) > 1e-6) {
        ++i;
        continue;
      }
      const ep::MicroOp op = flying[i].op;
      scheduler.completed(op);
      if (op.kind == ep::OpKind::kAllToAll && --chunks_left[op.tensor] == 0) {
        r.all_to_all_s += t - submitted_at[op.tensor];
      }
      flying.erase(flying.begin() + i);
    }
  }
  r.backward_s = t;
  return r;
}

nlohmann::json to_json(const LinkSimResult& r) {
  return {{"backward_s", r.backward_s},
          {"compute_end_s", r.compute_end_s},
          {"all_to_all_s", r.all_to_all_s},
          {"all_to_all_alone_s", r.all_to_all_alone_s}};
}

}  // namespace streamrl::planner
