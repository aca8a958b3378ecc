#include "streamrl/sparse/block_sparse_attention.h"

#include <algorithm>
#include <limits>

namespace streamrl::sparse {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();
// Score tiles are kept to this many elements (16 MB in fp32): long sequences then never allocate
// the [S, S] matrix, and the tiles stay in the heap instead of fresh page-faulted mmaps.
constexpr int64_t kTileElements = int64_t{4} << 20;

// Rows of x [Hkv, S, hd] per query head: [H, S, hd] (a view when H == Hkv).
torch::Tensor per_query_head(const torch::Tensor& x, int64_t H) {
  const int64_t Hkv = x.size(0);
  if (Hkv == H) return x;
  return x.unsqueeze(1)
      .expand({Hkv, H / Hkv, x.size(1), x.size(2)})
      .reshape({H, x.size(1), x.size(2)});
}

}  // namespace

torch::Tensor dense_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, double scale) {
  const int64_t H = q.size(0), S = q.size(1);
  const torch::Tensor kh = per_query_head(k, H), vh = per_query_head(v, H);
  // Query chunks against the keys up to the chunk's end (the causal upper triangle is skipped at
  // chunk granularity, as memory-efficient attention kernels do); additive -inf mask inside.
  const int64_t rows = std::clamp<int64_t>(kTileElements / std::max<int64_t>(1, H * S), 1, S);
  std::vector<torch::Tensor> outs;
  for (int64_t a = 0; a < S; a += rows) {
    const int64_t n = std::min(rows, S - a), end = a + n;
    const torch::Tensor mask =
        torch::full({n, end}, kMasked, q.options()).triu(a + 1);  // key j > query a + i
    const torch::Tensor scores =
        torch::matmul(q.narrow(1, a, n), kh.narrow(1, 0, end).transpose(1, 2)) * scale + mask;
    outs.push_back(torch::matmul(torch::softmax(scores, -1), vh.narrow(1, 0, end)));
  }
  return outs.size() == 1 ? outs[0] : torch::cat(outs, 1);
}

torch::Tensor block_sparse_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& blocks,
                                     int64_t block, double scale) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.sizes() == k.sizes() && q.size(1) == k.size(1) &&
                  q.size(2) == k.size(2) && q.size(0) % k.size(0) == 0,
              "block_sparse_attention: q [H, S, hd], k and v [Hkv, S, hd] expected");
  const int64_t H = q.size(0), S = q.size(1), hd = q.size(2), bs = block;
  const int64_t nb = (S + bs - 1) / bs, pad = nb * bs - S;
  TORCH_CHECK(blocks.dim() == 3 && blocks.size(0) == H && blocks.size(1) == nb,
              "block_sparse_attention: blocks must be [H, ", nb, ", keep], got ", blocks.sizes());
  const int64_t keep = blocks.size(2);
  auto padded = [&](const torch::Tensor& t) {
    return pad == 0 ? t : torch::cat({t, torch::zeros({t.size(0), pad, hd}, t.options())}, 1);
  };
  const torch::Tensor qb = padded(q).view({H, nb, bs, hd});
  const torch::Tensor kh = padded(per_query_head(k, H)).reshape({H * nb, bs, hd});
  const torch::Tensor vh = padded(per_query_head(v, H)).reshape({H * nb, bs, hd});
  const torch::Tensor idx = blocks.to(torch::kLong).to(q.device());
  // Masks: a key after its query, or a block already listed earlier in the row.
  torch::Tensor dup = torch::zeros_like(idx, idx.options().dtype(torch::kBool));
  for (int64_t s = 1; s < keep; ++s) {
    dup.select(2, s).copy_((idx.narrow(2, 0, s) == idx.select(2, s).unsqueeze(2)).any(2));
  }
  const torch::Tensor offs = torch::arange(bs, idx.options());
  const torch::Tensor head_base = torch::arange(H, idx.options()).view({H, 1, 1}) * nb;
  // Chunks of query blocks, each gathering its selected keys and values: [H, c, keep * bs, hd].
  const int64_t chunk = std::clamp<int64_t>(kTileElements / (H * bs * keep * bs), 1, nb);
  std::vector<torch::Tensor> outs;
  for (int64_t a = 0; a < nb; a += chunk) {
    const int64_t c = std::min(chunk, nb - a);
    const torch::Tensor ix = idx.narrow(1, a, c);
    const torch::Tensor flat = (ix + head_base).reshape({-1});
    const torch::Tensor kg = kh.index_select(0, flat).view({H, c, keep * bs, hd});
    const torch::Tensor vg = vh.index_select(0, flat).view({H, c, keep * bs, hd});
    const torch::Tensor key_pos = (ix.unsqueeze(3) * bs + offs).view({H, c, 1, keep * bs});
    const torch::Tensor query_pos =
        ((torch::arange(c, idx.options()) + a).view({c, 1}) * bs + offs).view({1, c, bs, 1});
    const torch::Tensor masked =
        (key_pos > query_pos) |
        dup.narrow(1, a, c).unsqueeze(3).expand({H, c, keep, bs}).reshape({H, c, 1, keep * bs});
    const torch::Tensor scores =
        torch::matmul(qb.narrow(1, a, c), kg.transpose(2, 3)) * scale;  // [H, c, bs, keep * bs]
    outs.push_back(torch::matmul(torch::softmax(scores.masked_fill(masked, kMasked), -1), vg));
  }
  const torch::Tensor out = outs.size() == 1 ? outs[0] : torch::cat(outs, 1);
  return out.view({H, nb * bs, hd}).narrow(1, 0, S);
}

}  // namespace streamrl::sparse
