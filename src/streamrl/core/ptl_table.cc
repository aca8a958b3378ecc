#include "streamrl/core/ptl_table.h"

#include <algorithm>
#include <map>

#include "streamrl/core/errors.h"

namespace streamrl::core {

PtlTable PtlTable::from_json(const nlohmann::json& j) {
  std::vector<Point> points;
  double prefill = 0;
  int threads = 0;
  try {
    for (const auto& pt : j.at("ptl")) {
      points.push_back({pt.at("batch_size").get<int>(), pt.at("context").get<int>(),
                        pt.at("step_seconds").get<double>()});
    }
    prefill = j.value("prefill_tokens_per_s", 0.0);
    threads = j.value("threads", 0);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("malformed PTL profile: ") + e.what());
  }
  return from_points(points, prefill, threads);
}

PtlTable PtlTable::from_points(const std::vector<Point>& points, double prefill_tokens_per_s,
                               int threads) {
  PtlTable t;
  t.prefill_tokens_per_s_ = prefill_tokens_per_s;
  t.threads_ = threads;
  std::map<int, std::vector<std::pair<double, double>>> by_context;
  for (const Point& p : points) {
    if (p.batch_size < 1 || p.context < 0 || !(p.step_seconds > 0)) {
      throw InputError("malformed PTL profile: a point with batch < 1, context < 0 or time <= 0");
    }
    by_context[p.context].emplace_back(p.batch_size, p.step_seconds);
  }
  if (by_context.empty()) throw InputError("malformed PTL profile: no points");
  for (auto& [ctx, curve] : by_context) {
    std::sort(curve.begin(), curve.end());
    t.contexts_.push_back(ctx);
    t.curves_.push_back(std::move(curve));
  }
  return t;
}

double PtlTable::at_context(size_t ci, double batch) const {
  const auto& c = curves_[ci];
  if (c.size() == 1 || batch <= c.front().first) return c.front().second;
  size_t i = 1;
  while (i + 1 < c.size() && batch > c[i].first) ++i;
  const auto& [b0, s0] = c[i - 1];
  const auto& [b1, s1] = c[i];
  return s0 + (s1 - s0) * (batch - b0) / (b1 - b0);
}

double PtlTable::step_seconds(double batch, double context) const {
  if (contexts_.size() == 1 || context <= contexts_.front()) return at_context(0, batch);
  size_t i = 1;
  while (i + 1 < contexts_.size() && context > contexts_[i]) ++i;
  const double s0 = at_context(i - 1, batch), s1 = at_context(i, batch);
  const double c0 = contexts_[i - 1], c1 = contexts_[i];
  return std::max(1e-9, s0 + (s1 - s0) * (context - c0) / (c1 - c0));
}

int PtlTable::max_batch() const {
  int m = 0;
  for (const auto& c : curves_) m = std::max(m, static_cast<int>(c.back().first));
  return m;
}

}  // namespace streamrl::core
