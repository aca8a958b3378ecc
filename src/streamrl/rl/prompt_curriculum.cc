#include "streamrl/rl/prompt_curriculum.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "streamrl/core/errors.h"
#include "streamrl/engine/sampler.h"
#include "streamrl/tasks/split.h"

namespace streamrl::rl {

void PassRateCurriculum::observe(int difficulty, double score) {
  auto& r = recent_[difficulty];
  r.push_back(score >= 1.0 ? 1 : 0);
  while (static_cast<int>(r.size()) > o_.window) r.pop_front();
}

std::map<int, double> PassRateCurriculum::pass_rates() const {
  std::map<int, double> out;
  for (const auto& [d, r] : recent_) {
    if (r.empty()) continue;
    double passes = 0;
    for (uint8_t x : r) passes += x;
    out[d] = passes / static_cast<double>(r.size());
  }
  return out;
}

std::map<int, double> PassRateCurriculum::weights() const {
  std::map<int, double> out;
  for (const auto& [d, p] : pass_rates()) {
    out[d] = std::max(o_.floor, std::pow(4.0 * p * (1.0 - p), o_.power));
  }
  return out;
}

nlohmann::json PassRateCurriculum::state() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [d, r] : recent_) j[std::to_string(d)] = std::vector<int>(r.begin(), r.end());
  return j;
}

void PassRateCurriculum::restore(const nlohmann::json& state) {
  recent_.clear();
  for (const auto& [d, r] : state.items()) {
    auto& q = recent_[std::stoi(d)];
    for (const auto& x : r) q.push_back(static_cast<uint8_t>(x.get<int>()));
  }
}

tasks::Problem draw_training_problem(const tasks::Task& task, uint64_t seed, uint64_t index,
                                     int max_difficulty, const std::map<int, double>* weights) {
  if (max_difficulty < 0 && weights == nullptr) {
    return tasks::draw_problem(task, seed, tasks::Split::kTrain, index);
  }
  std::optional<tasks::Problem> within_cap;
  for (int a = 0; a < kCurriculumCandidates; ++a) {
    tasks::Problem p =
        tasks::draw_problem(task, seed, tasks::Split::kTrain, index * kCurriculumCandidates + a);
    if (max_difficulty >= 0 && p.difficulty > max_difficulty) continue;
    double w = 1.0;
    if (weights) {
      auto it = weights->find(p.difficulty);
      if (it != weights->end()) w = it->second;
    }
    if (w >= 1.0 || engine::counter_uniform(seed, index, static_cast<uint64_t>(a)) < w) return p;
    within_cap = std::move(p);
  }
  if (within_cap) return *within_cap;
  throw InputError("data.max_difficulty " + std::to_string(max_difficulty) +
                   ": no problem that easy in " + std::to_string(kCurriculumCandidates) +
                   " draws of task " + task.name());
}

}  // namespace streamrl::rl
