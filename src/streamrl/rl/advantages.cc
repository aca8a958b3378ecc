// GRPO / Dr.GRPO / RLOO advantages over one group of scalar rewards (advantages.h, spec §1).
#include "streamrl/rl/advantages.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

namespace streamrl::rl {
namespace {

struct Moments {
  double mean = 0;
  double std = 0;  // unbiased (n - 1); exactly 0 when all values are equal or n < 2
};

// Mean and unbiased std of values[i] for i in `members`, skipping `skip` (or nothing when skip
// is -1). When every counted value is equal the mean is that value exactly and the std exactly 0:
// the leave-one-out path divides by this std only where it is non-zero, so rounding noise such as
// 1e-17 must not pass for spread.
Moments moments(const std::vector<double>& values, const std::vector<size_t>& members,
                int64_t skip) {
  double sum = 0;
  size_t n = 0;
  bool all_equal = true;
  double first = 0;
  for (size_t i : members) {
    if (static_cast<int64_t>(i) == skip) continue;
    if (n == 0) first = values[i];
    all_equal = all_equal && values[i] == first;
    sum += values[i];
    ++n;
  }
  if (n == 0) return {};
  if (all_equal) return {first, 0.0};
  Moments m;
  m.mean = sum / static_cast<double>(n);
  if (n < 2) return m;
  double sq = 0;
  for (size_t i : members) {
    if (static_cast<int64_t>(i) == skip) continue;
    sq += (values[i] - m.mean) * (values[i] - m.mean);
  }
  m.std = std::sqrt(sq / static_cast<double>(n - 1));
  return m;
}

}  // namespace

std::vector<double> group_advantages(const std::vector<double>& rewards,
                                     const AdvantageOptions& options) {
  std::vector<double> adv(rewards.size(), 0.0);
  std::vector<size_t> valid;  // indices of scorable rewards
  for (size_t i = 0; i < rewards.size(); ++i) {
    if (std::isfinite(rewards[i])) valid.push_back(i);
  }
  // Singletons and empty groups keep A = 0 (see the header for why).
  if (valid.size() < 2) return adv;
  const Moments group = moments(rewards, valid, -1);
  if (group.std == 0) return adv;  // zero variance: exactly 0 in every mode (§1.3)

  for (size_t i : valid) {
    if (options.leave_one_out) {
      // b_i = mean of the other rewards; sigma_-i = their unbiased std, undefined (taken as 0,
      // like NeMo-RL's nan_to_num) when only one other reward exists.
      const Moments others = moments(rewards, valid, static_cast<int64_t>(i));
      const double centred = rewards[i] - others.mean;
      adv[i] = (options.norm_by_std && others.std > 0) ? centred / (others.std + options.epsilon)
                                                       : centred;
    } else {
      const double centred = rewards[i] - group.mean;
      adv[i] = options.norm_by_std ? centred / (group.std + options.epsilon) : centred;
    }
  }
  return adv;
}

std::vector<double> grouped_advantages(const std::vector<double>& rewards,
                                       const std::vector<int64_t>& group_ids,
                                       const AdvantageOptions& options) {
  if (rewards.size() != group_ids.size()) {
    throw std::invalid_argument("grouped_advantages: " + std::to_string(rewards.size()) +
                                " rewards but " + std::to_string(group_ids.size()) + " group ids");
  }
  std::unordered_map<int64_t, std::vector<size_t>> members;
  for (size_t i = 0; i < group_ids.size(); ++i) members[group_ids[i]].push_back(i);
  std::vector<double> adv(rewards.size(), 0.0);
  for (const auto& [id, idx] : members) {
    std::vector<double> group_rewards;
    group_rewards.reserve(idx.size());
    for (size_t i : idx) group_rewards.push_back(rewards[i]);
    const std::vector<double> group_adv = group_advantages(group_rewards, options);
    for (size_t k = 0; k < idx.size(); ++k) adv[idx[k]] = group_adv[k];
  }
  return adv;
}

torch::Tensor grpo_advantages(const torch::Tensor& rewards, const AdvantageOptions& options) {
  TORCH_CHECK(rewards.dim() == 1 || rewards.dim() == 2,
              "grpo_advantages: rewards must be [G] or [num_groups, G], got ", rewards.sizes());
  TORCH_CHECK(rewards.is_floating_point(), "grpo_advantages: rewards must be floating point");
  const torch::Tensor r2 = rewards.reshape({rewards.dim() == 1 ? 1 : rewards.size(0), -1})
                               .to(torch::kCPU, torch::kDouble)
                               .contiguous();
  torch::Tensor out = torch::empty_like(r2);
  const int64_t groups = r2.size(0), g = r2.size(1);
  const double* src = r2.data_ptr<double>();
  double* dst = out.data_ptr<double>();
  for (int64_t k = 0; k < groups; ++k) {
    const std::vector<double> adv =
        group_advantages(std::vector<double>(src + k * g, src + (k + 1) * g), options);
    std::copy(adv.begin(), adv.end(), dst + k * g);
  }
  return out.reshape(rewards.sizes()).to(rewards.scalar_type());
}

}  // namespace streamrl::rl
