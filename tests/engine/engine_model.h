// The engine tests' policy: the shared tiny model over a 23-token vocabulary.
#pragma once

#include "../tiny_model.h"

namespace streamrl::engine {

inline model::CausalLM engine_model(uint64_t seed = 11, int64_t max_positions = 128) {
  return testing_util::tiny_model(seed, 23, max_positions);
}

}  // namespace streamrl::engine
