// Each decoder layer's measured training cost on this machine: what a pipeline partition should
// balance instead of a FLOPs estimate, which misses per-op overheads, the embedding's gather and
// the loss on the last layer.
#pragma once

#include <cstdint>
#include <vector>

#include "streamrl/model/transformer.h"

namespace streamrl::model {

struct LayerSeconds {
  std::vector<double> forward;   // [L] wall seconds of layer l's forward (score_layers(l, l + 1))
  std::vector<double> backward;  // [L] of its backward (input and weight gradients)
};

// Times every layer of `model` alone on a synthetic batch of `rows` x `row_tokens` tokens (the
// embedding counted in the first layer, the final norm, LM head and log-probs in the last); each
// figure is the least of `repeats` after one untimed run. The least, not the median: on a shared
// machine the memory-bound LM head and log-softmax swing several-fold between runs of the same
// shape, and the undisturbed figure is the one the layers compare alike on. No random numbers
// are drawn and no `.grad` is written, so training that follows is unaffected. InputError for
// non-positive sizes or repeats.
LayerSeconds time_layers(CausalLM& model, int64_t rows, int64_t row_tokens, int repeats);

}  // namespace streamrl::model
