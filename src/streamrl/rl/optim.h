// Optimiser pieces shared by SFT and RL training: AdamW settings, the warmup + cosine learning-rate
// schedule (a pure function of the step), and global-norm gradient clipping.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "streamrl/core/config.h"

namespace streamrl::dist {
class ExpertDataParallel;  // dist/expert_parallel.h
}  // namespace streamrl::dist

namespace streamrl::rl {

struct OptimConfig {
  double lr = 1e-3;           // peak learning rate
  double min_lr_ratio = 0.1;  // cosine decays to lr * min_lr_ratio at total_steps
  int warmup_steps = 0;       // linear warmup from lr / warmup_steps to lr
  int total_steps = 1000;     // length of the cosine; steps beyond it stay at the minimum
  double weight_decay = 0.0;  // AdamW decoupled decay, applied to matrices only
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;  // max global L2 norm; 0 disables clipping

  // Reads keys of `section`; throws InputError for impossible values.
  void read(const core::Config& section);
};

// Learning rate at optimizer step `step` (0-based): linear warmup over warmup_steps, then cosine
// from lr down to lr * min_lr_ratio at total_steps.
double lr_at(const OptimConfig& config, int64_t step);

// AdamW over `model`'s parameters; vectors (norms, biases) get no weight decay.
std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model,
                                                const OptimConfig& config);

// Drops every parameter's gradient (PyTorch's zero_grad(set_to_none=True); libtorch 1.13's
// zero_grad() keeps zero-filled ones). A parameter no token reached in a step, such as an MoE
// expert nobody was routed to, then gets no AdamW update, the same whether or not the run was
// resumed: a kept zero gradient would still move it by its momentum, but only in a process that
// had used it before.
void clear_grads(torch::optim::Optimizer& optimizer);

// Sets every parameter group's learning rate.
void set_lr(torch::optim::Optimizer& optimizer, double lr);

// Clips gradients to `max_norm` (if > 0) and returns the global norm before clipping. A non-finite
// norm is returned as is, without touching the gradients, so the caller can stop the step.
// Under expert parallelism (`experts`) each rank holds only some experts: the squared norm of the
// expert gradients (model::is_expert_parameter) is summed over the expert group, so every rank
// clips by the same norm.
double clip_grad_norm(torch::nn::Module& model, double max_norm,
                      dist::ExpertDataParallel* experts = nullptr);

}  // namespace streamrl::rl
