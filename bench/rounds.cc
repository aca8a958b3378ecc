#include "rounds.h"

#include <algorithm>
#include <fstream>
#include <iostream>

#include "streamrl/core/stats.h"

namespace streamrl::bench {

nlohmann::json spread_json(const std::vector<double>& values) {
  if (values.empty()) return nullptr;
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return {{"median", core::median(values)},
          {"min", *lo},
          {"max", *hi},
          {"spread", *lo > 0 ? *hi / *lo - 1 : 0.0},
          {"values", values}};
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  if (!(in >> load)) return -1;
  return load;
}

void Rounds::begin_round(int r) {
  load_.resize(r + 1, -1);
  load_[r] = load_average();
  // Our own earlier round contributes up to `cores_` to the 1-minute average; more than that is
  // somebody else's work competing for the cores.
  if (load_[r] > cores_ + 0.5) {
    std::cerr << "bench " << bench_ << ": round " << r << " starts with load " << load_[r]
              << " on a benchmark of " << cores_ << " cores: figures of this round may be inflated"
              << std::endl;
  }
}

void Rounds::add(const std::string& key, double value) {
  values_[key][std::max(0, rounds() - 1)] = value;
}

std::vector<double> Rounds::values(const std::string& key) const {
  std::vector<double> out;
  auto it = values_.find(key);
  if (it == values_.end()) return out;
  for (const auto& [r, v] : it->second) out.push_back(v);
  return out;
}

double Rounds::median(const std::string& key) const {
  const auto v = values(key);
  return v.empty() ? 0.0 : core::median(v);
}

nlohmann::json Rounds::ratio(const std::string& numerator, const std::string& denominator) const {
  std::vector<double> r;
  auto n = values_.find(numerator), d = values_.find(denominator);
  if (n == values_.end() || d == values_.end()) return nullptr;
  for (const auto& [round, num] : n->second) {
    auto den = d->second.find(round);
    if (den != d->second.end() && den->second > 0) r.push_back(num / den->second);
  }
  return spread_json(r);
}

double Rounds::ratio_median(const std::string& numerator, const std::string& denominator) const {
  const nlohmann::json r = ratio(numerator, denominator);
  return r.is_null() ? 0.0 : r["median"].get<double>();
}

nlohmann::json Rounds::load_json() const {
  int over = 0;
  for (double l : load_) over += l > cores_ + 0.5;
  return {{"loadavg_1min_per_round", load_},
          {"cores_used", cores_},
          {"rounds_over_cores", over},
          {"note",
           "load at the start of each round (/proc/loadavg); rounds over the cores used "
           "competed with other work"}};
}

nlohmann::json Rounds::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, per_round] : values_) out[key] = summary(key);
  return out;
}

}  // namespace streamrl::bench
