#include "streamrl/planner/link_sim.h"

#include <algorithm>
#include <limits>
#include <map>

#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

// The rank's work in program order: compute runs one piece at a time; submissions are instant; a
// wait blocks compute until `need` chunks of an all-to-all have landed.
struct Step {
  enum Kind { kCompute, kAllReduce, kAllToAll, kWait } kind;
  double seconds = 0;
  bool combine = false;
  int tensor = 0;
  int64_t bytes = 0, tokens = 0;
  int need = 0;
};

// With `pipelined` (Lina), the expert FFN runs on each chunk of the first all-to-all as it lands
// and sends that chunk's result back at once; otherwise it waits for the whole exchange.
std::vector<Step> program(const std::vector<BackwardLayer>& layers, bool pipelined,
                          int64_t chunk_tokens) {
  std::vector<Step> steps;
  int tensor = 0;
  for (const BackwardLayer& l : layers) {
    if (l.moe && l.tokens > 0) {
      steps.push_back({Step::kCompute, l.combine_s, true});
      const int first = tensor++, grads = tensor++, second = tensor++;
      const int64_t chunk = pipelined ? chunk_tokens : l.tokens;
      const int chunks = static_cast<int>((l.tokens + chunk - 1) / chunk);
      steps.push_back({Step::kAllToAll, 0, false, first, l.bytes_per_token, l.tokens});
      for (int c = 0; c < chunks; ++c) {
        const int64_t n = std::min(chunk, l.tokens - c * chunk);
        steps.push_back({Step::kWait, 0, false, first, 0, 0, c + 1});
        steps.push_back({Step::kCompute, l.expert_s * n / l.tokens});
        steps.push_back({Step::kAllToAll, 0, false, second, l.bytes_per_token, n});
      }
      steps.push_back({Step::kAllReduce, 0, false, grads, l.expert_gradient_bytes});
      steps.push_back({Step::kWait, 0, false, second, 0, 0, chunks});
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
  if (link.compute_share < 0 || link.compute_share > 1) {
    throw InputError("link compute_share must be in [0, 1]");
  }
  if (options.all_to_all_chunk_tokens < 1) throw InputError("all-to-all chunks need >= 1 token");
  ep::CommScheduler scheduler(options);
  std::map<int, int> landed;  // all-to-all chunks landed, per tensor
  const std::vector<Step> steps =
      program(layers, options.policy == ep::Policy::kPartitioned, options.all_to_all_chunk_tokens);
  std::vector<InFlight> flying;
  LinkSimResult r;
  for (const BackwardLayer& l : layers) {
    if (l.moe && l.tokens > 0) {
      r.all_to_all_alone_s +=
          2 * (link.op_latency_s + l.tokens * l.bytes_per_token / link.bytes_per_s);
    }
  }
  double t = 0, compute_left = 0;
  int a2a_pending = 0;  // all-to-all micro-ops submitted and not landed
  size_t next = 0;
  bool computing = false;
  for (;;) {
    // Run the program up to the next compute or unmet wait.
    while (!computing && next < steps.size()) {
      const Step& s = steps[next];
      if (s.kind == Step::kWait && landed[s.tensor] < s.need) break;
      ++next;
      if (s.kind == Step::kCompute) {
        computing = s.seconds > 0, compute_left = s.seconds;
        scheduler.set_combine_running(computing && s.combine);
      } else if (s.kind == Step::kAllReduce && s.bytes > 0) {
        scheduler.submit_all_reduce(s.tensor, s.bytes);
      } else if (s.kind == Step::kAllToAll) {
        a2a_pending += scheduler.submit_all_to_all(s.tensor, s.tokens, s.bytes);
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
    const double compute_rate = flying.empty() ? 1 : 1 - link.compute_share;
    double dt = computing && compute_rate > 0 ? compute_left / compute_rate
                                              : std::numeric_limits<double>::infinity();
    for (const InFlight& f : flying) dt = std::min(dt, f.remaining / rate);
    t += dt;
    if (a2a_pending > 0) r.all_to_all_s += dt;
    if (!computing && next < steps.size() && steps[next].kind == Step::kWait) {
      r.all_to_all_blocked_s += dt;
    }
    // The piece or ops that set dt end now, exactly (dt is their own quotient); the others
    // drain by what the link carried.
    if (computing && compute_rate > 0 && dt == compute_left / compute_rate) {
      computing = false;
      scheduler.set_combine_running(false);
      r.compute_end_s = t;
    } else if (computing) {
      compute_left -= dt * compute_rate;
    }
    for (size_t i = 0; i < flying.size();) {
      if (flying[i].remaining / rate != dt) {
        flying[i].remaining = std::max(0.0, flying[i].remaining - dt * rate);
        ++i;
        continue;
      }
      const ep::MicroOp op = flying[i].op;
      scheduler.completed(op);
      if (op.kind == ep::OpKind::kAllToAll) {
        ++landed[op.tensor];
        --a2a_pending;
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
          {"all_to_all_blocked_s", r.all_to_all_blocked_s},
          {"all_to_all_alone_s", r.all_to_all_alone_s}};
}

}  // namespace streamrl::planner
