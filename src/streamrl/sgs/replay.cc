#include "streamrl/sgs/replay.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "streamrl/core/batching_sim.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/stats.h"
#include "streamrl/sgs/dispatch.h"

namespace streamrl::sgs {

double replay_instance(const core::PtlTable& ptl, const std::vector<double>& lengths, int batch,
                       int prompt_len) {
  const core::StepFn step = [&ptl](double bs, double context) {
    return ptl.step_seconds(bs, context);
  };
  core::BatchingSim sim(step, prompt_len);
  double t = 0;
  size_t next = 0;
  batch = std::max(batch, 1);
  while (next < lengths.size() || sim.running() > 0) {
    int admitted = 0;
    while (next < lengths.size() && sim.running() < batch) {
      sim.admit(static_cast<int>(next), std::max(1.0, std::ceil(lengths[next])), 0);
      ++next;
      ++admitted;
    }
    if (admitted > 0 && ptl.prefill_tokens_per_s() > 0) {
      t += admitted * static_cast<double>(prompt_len) / ptl.prefill_tokens_per_s();
    }
    t += sim.decode_to_next_completion().seconds;
  }
  return t;
}

double replay_instance(const engine::Profile& profile, const std::vector<double>& lengths,
                       int batch, int prompt_len) {
  return replay_instance(profile.table(), lengths, batch, prompt_len);
}

std::vector<double> calibrate_to_quantiles(const std::vector<double>& estimates,
                                           const LengthWindow& window) {
  const size_t m = estimates.size();
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return estimates[a] > estimates[b]; });
  if (m == 0) return {};
  if (window.size() == 0)
    throw InputError("length window is empty: no observed output lengths yet");
  const std::vector<double> sorted = window.sorted();  // once, not per rank
  std::vector<double> out(m);
  for (size_t r = 0; r < m;) {
    size_t end = r + 1;  // equal estimates share the quantile of their middle rank
    while (end < m && estimates[order[end]] == estimates[order[r]]) ++end;
    const double mid = 0.5 * static_cast<double>(r + end);
    const double q = core::percentile_of_sorted(sorted, 1.0 - mid / static_cast<double>(m));
    for (size_t i = r; i < end; ++i) out[order[i]] = q;
    r = end;
  }
  return out;
}

}  // namespace streamrl::sgs
