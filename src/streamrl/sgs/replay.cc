#include "streamrl/sgs/replay.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "streamrl/core/errors.h"
#include "streamrl/core/stats.h"
#include "streamrl/sgs/dispatch.h"

namespace streamrl::sgs {

double replay_instance(const engine::Profile& profile, const std::vector<double>& lengths,
                       int batch, int prompt_len) {
  struct Seq {
    double remaining, generated;
  };
  if (lengths.empty()) return 0.0;
  const core::PtlTable ptl = profile.table();
  std::vector<Seq> running;
  double t = 0;
  size_t next = 0;
  batch = std::max(batch, 1);
  while (next < lengths.size() || !running.empty()) {
    int admitted = 0;
    while (next < lengths.size() && static_cast<int>(running.size()) < batch) {
      running.push_back({std::max(1.0, std::ceil(lengths[next++])), 0});
      ++admitted;
    }
    if (admitted > 0 && ptl.prefill_tokens_per_s() > 0) {
      t += admitted * static_cast<double>(prompt_len) / ptl.prefill_tokens_per_s();
    }
    // Between completions the batch is constant: advance to the next one in a single chunk, at
    // the mean context halfway through it.
    double k = running.front().remaining, generated = 0;
    for (const Seq& s : running) {
      k = std::min(k, s.remaining);
      generated += s.generated;
    }
    const double bs = static_cast<double>(running.size());
    const double context = prompt_len + generated / bs + k / 2;
    t += k * ptl.step_seconds(bs, context);
    for (Seq& s : running) {
      s.remaining -= k;
      s.generated += k;
    }
    std::erase_if(running, [](const Seq& s) { return s.remaining <= 0; });
  }
  return t;
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
