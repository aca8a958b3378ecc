// Fitting a model's sparse-attention predictors to its own attention: DSV's first stage (the
// predictor learns beside a frozen model) run on fixed token sequences, e.g. long rollouts.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "streamrl/model/transformer.h"

namespace streamrl::model {

struct PredictorFitConfig {
  int steps = 100;
  double lr = 5e-3;     // Adam
  int64_t stride = 16;  // every stride-th query scored (sparse::predictor_loss)
};

// Per layer, the predictor loss on the sequences before the first and after the last step.
struct PredictorFit {
  std::vector<double> loss_first, loss_last;
};

// `lm` must have sparse attention enabled. sequences: token ids [T] each (T >= 2). Every step
// takes one sequence (round robin) and updates every layer's predictor with Adam on
// sparse::predictor_loss against the real queries and keys; the model gets no gradient.
PredictorFit fit_sparse_predictors(CausalLM& lm, const std::vector<torch::Tensor>& sequences,
                                   const PredictorFitConfig& config = {});

}  // namespace streamrl::model
