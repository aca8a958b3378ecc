#include "streamrl/rl/optim.h"
#include "streamrl/dist/expert_parallel.h"

#include <cmath>
#include <numbers>

#include "streamrl/model/moe.h"

namespace streamrl::rl {

void OptimConfig::read(const core::Config& c) {
  c.get("lr", lr);
  c.get("min_lr_ratio", min_lr_ratio);
  c.get("warmup_steps", warmup_steps);
  c.get("total_steps", total_steps);
  c.get("weight_decay", weight_decay);
  c.get("beta1", beta1);
  c.get("beta2", beta2);
  c.get("eps", eps);
  c.get("grad_clip", grad_clip);
  auto fail = [&](const std::string& what) {
    throw InputError("config '" + c.prefix() + "': " + what);
  };
  if (!(lr > 0) || !std::isfinite(lr))
    fail("lr must be a positive number, got " + std::to_string(lr));
  if (min_lr_ratio < 0 || min_lr_ratio > 1) fail("min_lr_ratio must be in [0, 1]");
  if (warmup_steps < 0) fail("warmup_steps must be >= 0");
  if (total_steps < 1) fail("total_steps must be >= 1");
  if (weight_decay < 0) fail("weight_decay must be >= 0");
  if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1) fail("betas must be in [0, 1)");
  if (grad_clip < 0) fail("grad_clip must be >= 0 (0 disables)");
}

double lr_at(const OptimConfig& c, int64_t step) {
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step + 1) / c.warmup_steps;
  const double span = std::max(1, c.total_steps - c.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / span);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine);
}

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model, const OptimConfig& c) {
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(c.weight_decay));
  if (!no_decay.empty()) groups.emplace_back(no_decay, options(0.0));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(c.lr));
}

void clear_grads(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) p.mutable_grad() = torch::Tensor();
  }
}

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
}

double clip_grad_norm(torch::nn::Module& model, double max_norm,
                      dist::ExpertDataParallel* experts) {
  torch::NoGradGuard no_grad;
  double sq = 0, expert_sq = 0;
  std::vector<torch::Tensor> grads;
  for (auto& p : model.named_parameters()) {
    const torch::Tensor& g = p.value().grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    const double v = g.pow(2).sum().item<double>();
    (experts && model::is_expert_parameter(p.key()) ? expert_sq : sq) += v;
  }
  if (experts) sq += experts->sum_over_expert_group(expert_sq);
  const double norm = std::sqrt(sq);
  if (!std::isfinite(norm) || max_norm <= 0 || norm <= max_norm) return norm;
  const double scale = max_norm / (norm + 1e-6);
  for (auto& g : grads) g.mul_(scale);
  return norm;
}

}  // namespace streamrl::rl
