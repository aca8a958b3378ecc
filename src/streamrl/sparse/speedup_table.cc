#include "streamrl/sparse/speedup_table.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "streamrl/core/device.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/stats.h"
#include "streamrl/sparse/block_sparse_attention.h"

namespace streamrl::sparse {
namespace {

template <class F>
double seconds(torch::Device device, F&& f) {
  core::synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  f();
  core::synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

nlohmann::json SpeedupTable::to_json() const {
  nlohmann::json table = nlohmann::json::array();
  for (const SpeedupRow& r : rows) {
    table.push_back({{"tokens", r.tokens},
                     {"dense_s", r.dense_s},
                     {"sparse_s", r.sparse_s},
                     {"speedup", r.sparse_s > 0 ? r.dense_s / r.sparse_s : 0.0}});
  }
  return {{"min_tokens", min_tokens}, {"table", std::move(table)}};
}

SpeedupTable measure_speedup_table(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t rank,
                                   const KeyBlockConfig& config, int64_t max_tokens,
                                   torch::Device device, int repeats) {
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || head_dim < 1 || rank < 1 ||
      config.block < 1 || repeats < 1) {
    throw InputError("sparse speed-up table: bad layer shape or block config");
  }
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(device);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  SpeedupTable table;
  for (int64_t S = 2 * config.block; S <= max_tokens; S *= 2) {
    const torch::Tensor q = torch::randn({heads, S, head_dim}, opts).requires_grad_();
    const torch::Tensor k = torch::randn({kv_heads, S, head_dim}, opts).requires_grad_();
    const torch::Tensor v = torch::randn({kv_heads, S, head_dim}, opts).requires_grad_();
    const torch::Tensor q_lr = torch::randn({heads, S, rank}, opts);
    const torch::Tensor k_lr = torch::randn({heads, S, rank}, opts);
    std::vector<double> dense, sparse;
    for (int r = 0; r < repeats; ++r) {
      dense.push_back(
          seconds(device, [&] { dense_causal_attention(q, k, v, scale).sum().backward(); }));
      sparse.push_back(seconds(device, [&] {
        const torch::Tensor blocks = select_key_blocks(q_lr, k_lr, config);
        block_sparse_attention(q, k, v, blocks, config.block, scale).sum().backward();
      }));
    }
    table.rows.push_back({S, core::median(dense), core::median(sparse)});
  }
  // From the longest length down, while sparse stays faster.
  table.min_tokens = table.rows.empty() ? 2 * config.block : table.rows.back().tokens * 2;
  for (auto it = table.rows.rbegin(); it != table.rows.rend() && it->sparse_s < it->dense_s; ++it) {
    table.min_tokens = it->tokens;
  }
  return table;
}

}  // namespace streamrl::sparse
