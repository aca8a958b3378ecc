// Test inputs shared by the pipeline and pipeline-emulator tests: long-tailed batches like RL
// responses, and op costs of micro-batches under a uniform per-layer cost, built here rather than
// by the planner so the pipeline tests need no planner.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "streamrl/pipeline/micro_batches.h"
#include "streamrl/pipeline/op_costs.h"
#include "streamrl/pipeline/schedule.h"

namespace streamrl::pipeline::test_inputs {

// Log-normal lengths (median `median`, sigma 1.2: the longest of 64 is ~15x the median) clamped
// to [8, 8192], with one in eight from a second, longer mode, as a few hard prompts give.
inline std::vector<int64_t> long_tailed_lengths(std::mt19937_64& rng, int n, double median = 200) {
  std::lognormal_distribution<double> body(std::log(median), 1.2), tail(std::log(median * 8), 0.5);
  std::bernoulli_distribution long_mode(0.125);
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) {
    const double len = long_mode(rng) ? tail(rng) : body(rng);
    out.push_back(std::clamp<int64_t>(std::llround(len), 8, 8192));
  }
  return out;
}

// Every (stage, chunk) runs `layers_per_chunk` identical layers: forward `per_token` s per token
// plus `per_token_sq` s per squared length, backward twice that; one activation byte per token
// and layer; a transfer costs `latency` + tokens * `per_token_transfer`.
inline OpCosts uniform_layer_costs(const std::vector<MicroBatch>& mbs, int stages, int chunks,
                                   int layers_per_chunk = 1, double per_token = 1e-6,
                                   double per_token_sq = 1e-9, double latency = 1e-5,
                                   double per_token_transfer = 1e-8) {
  OpCosts c = OpCosts::zeros(stages, chunks, static_cast<int>(mbs.size()));
  for (int s = 0; s < stages; ++s) {
    for (int v = 0; v < chunks; ++v) {
      for (size_t m = 0; m < mbs.size(); ++m) {
        const int i = c.index(s, v, static_cast<int>(m));
        const double f = layers_per_chunk * (per_token * static_cast<double>(mbs[m].tokens) +
                                             per_token_sq * static_cast<double>(mbs[m].tokens_sq));
        c.forward_s[i] = f;
        c.backward_s[i] = 2 * f;
        c.activation_bytes[i] = layers_per_chunk * static_cast<double>(mbs[m].tokens);
      }
    }
  }
  for (size_t m = 0; m < mbs.size(); ++m) {
    c.transfer_s[m] = latency + per_token_transfer * static_cast<double>(mbs[m].tokens);
  }
  return c;
}

// The most activation bytes any stage holds at once when it runs its list in order (forward
// start to backward end): recomputed from the list, independently of the emulator.
inline double peak_held_bytes(const Schedule& s, const OpCosts& c) {
  double peak = 0;
  for (int stage = 0; stage < s.stages; ++stage) {
    double held = 0;
    for (const Op& op : s.ops[stage]) {
      const double b = c.activation(stage, op.chunk, op.micro_batch);
      held += op.kind == OpKind::kForward ? b : -b;
      peak = std::max(peak, held);
    }
  }
  return peak;
}

}  // namespace streamrl::pipeline::test_inputs
