// DSV's sparse decoding against references written with tensor ops: with every block kept it is
// dense decoding; otherwise it attends exactly to the brute-force top-k blocks plus the window.
#include <gtest/gtest.h>

#include <set>

#include "streamrl/model/decode_attention.h"

namespace streamrl::model {
namespace {

using torch::Tensor;

struct Case {
  int64_t S = 3, Hkv = 2, H = 4, T = 200, N = 5, hd = 32, r = 8;
  Tensor k, v, k_lr, q, q_lr, slots, lens;
  explicit Case(std::vector<int64_t> row_lens, uint64_t seed = 5) {
    torch::manual_seed(seed);
    N = static_cast<int64_t>(row_lens.size());
    k = torch::randn({S, Hkv, T, hd});
    v = torch::randn({S, Hkv, T, hd});
    k_lr = torch::randn({S, H, T, r});
    q = torch::randn({N, H, hd});
    q_lr = torch::randn({N, H, r});
    std::vector<int64_t> sl;
    for (int64_t n = 0; n < N; ++n) sl.push_back(n % S);
    slots = torch::tensor(sl, torch::kLong);
    lens = torch::tensor(row_lens, torch::kLong);
  }
};

// Row n, kv head j: the positions the brute-force selection attends to.
std::set<int64_t> reference_keys(const Case& c, int64_t n, int64_t j,
                                 const SparseDecodeOptions& o) {
  const int64_t len = c.lens[n].item<int64_t>(), slot = c.slots[n].item<int64_t>();
  const int64_t window = std::max<int64_t>(0, len - o.recent) / o.block;
  std::set<int64_t> keys;
  if (window < o.keep) {
    for (int64_t t = 0; t < len; ++t) keys.insert(t);
    return keys;
  }
  const int64_t G = c.H / c.Hkv;
  // Full [window * block] low-rank score rows of the group's heads, max over heads and block.
  Tensor s =
      torch::matmul(c.q_lr[n].narrow(0, j * G, G).unsqueeze(1),
                    c.k_lr[slot].narrow(0, j * G, G).narrow(1, 0, window * o.block).transpose(1, 2))
          .squeeze(1);  // [G, window * block]
  Tensor block_score = std::get<0>(s.amax(0).view({window, o.block}).max(1));
  Tensor top = std::get<1>(block_score.topk(o.keep));
  for (int64_t i = 0; i < o.keep; ++i) {
    const int64_t b = top[i].item<int64_t>();
    for (int64_t t = b * o.block; t < (b + 1) * o.block; ++t) keys.insert(t);
  }
  for (int64_t t = window * o.block; t < len; ++t) keys.insert(t);
  return keys;
}

// Softmax attention of the G heads of kv head j over `keys` only, in double.
Tensor reference_attention(const Case& c, int64_t n, int64_t j, const std::set<int64_t>& keys,
                           double scale) {
  const int64_t G = c.H / c.Hkv, slot = c.slots[n].item<int64_t>();
  const Tensor idx = torch::tensor(std::vector<int64_t>(keys.begin(), keys.end()), torch::kLong);
  const Tensor kk = c.k[slot][j].index_select(0, idx).to(torch::kDouble);
  const Tensor vv = c.v[slot][j].index_select(0, idx).to(torch::kDouble);
  const Tensor qq = c.q[n].narrow(0, j * G, G).to(torch::kDouble);
  return torch::softmax(torch::matmul(qq, kk.t()) * scale, -1).matmul(vv);  // [G, hd]
}

TEST(SparseDecode, KeepingEveryBlockIsDenseDecoding) {
  Case c({1, 200, 77, 130, 64});
  SparseDecodeOptions o;
  o.block = 16;
  o.keep = 12;  // the 200-key row has exactly 12 blocks before its window: all gathered
  o.recent = 8;
  int64_t attended = 0;
  const Tensor sparse =
      sparse_decode_attention(c.q, c.k, c.v, c.q_lr, c.k_lr, c.slots, c.lens, 0.3, o, &attended);
  const Tensor dense = decode_attention(c.q, c.k, c.v, c.slots, c.lens, 0.3);
  EXPECT_LT((sparse - dense).abs().max().item<double>(), 1e-5);
  EXPECT_EQ(attended, (1 + 200 + 77 + 130 + 64) * c.Hkv);
}

TEST(SparseDecode, AttendsToTheBruteForceTopBlocksAndTheWindow) {
  for (const int64_t recent : {0, 5, 40}) {
    SCOPED_TRACE(recent);
    Case c({200, 150, 33, 199, 97, 120}, 11 + recent);
    SparseDecodeOptions o;
    o.block = 16;
    o.keep = 3;
    o.recent = recent;
    int64_t attended = 0;
    const Tensor got =
        sparse_decode_attention(c.q, c.k, c.v, c.q_lr, c.k_lr, c.slots, c.lens, 0.25, o, &attended);
    const Tensor mask = sparse_decode_key_mask(c.q_lr, c.k_lr, c.Hkv, c.slots, c.lens, o);
    int64_t expected_keys = 0;
    for (int64_t n = 0; n < c.N; ++n) {
      for (int64_t j = 0; j < c.Hkv; ++j) {
        const auto keys = reference_keys(c, n, j, o);
        std::set<int64_t> masked;
        for (int64_t t = 0; t < mask.size(2); ++t) {
          if (mask[n][j][t].item<bool>()) masked.insert(t);
        }
        EXPECT_EQ(masked, keys) << "row " << n << " kv " << j;
        expected_keys += static_cast<int64_t>(keys.size());
        const Tensor want = reference_attention(c, n, j, keys, 0.25);
        const Tensor have = got[n].narrow(0, j * (c.H / c.Hkv), c.H / c.Hkv).to(torch::kDouble);
        EXPECT_LT((want - have).abs().max().item<double>(), 1e-5) << "row " << n << " kv " << j;
      }
    }
    EXPECT_EQ(attended, expected_keys);
    // Fewer keys than dense: the long rows were cut.
    EXPECT_LT(attended, c.lens.sum().item<int64_t>() * c.Hkv);
  }
}

TEST(SparseDecode, RejectsMismatchedLowRankShapes) {
  Case c({10, 20});
  SparseDecodeOptions o;
  EXPECT_THROW(sparse_decode_attention(c.q, c.k, c.v, c.q_lr.narrow(2, 0, 4), c.k_lr, c.slots,
                                       c.lens, 0.3, o),
               c10::Error);
}

}  // namespace
}  // namespace streamrl::model
