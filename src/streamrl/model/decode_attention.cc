#include "streamrl/model/decode_attention.h"

#include "streamrl/model/precision.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

namespace streamrl::model {
namespace {

#pragma GCC diagnostic ignored "-Wpsabi"  // Vec16 passes between inlined helpers only
// 16 floats as one vector (GCC's vector extension): one AVX-512 register, for the kernels built
// for AVX-512 (the helpers inline into them).
typedef float Vec16 __attribute__((vector_size(64)));
__attribute__((always_inline)) inline Vec16 load16(const float* p) {
  Vec16 x;
  std::memcpy(&x, p, sizeof x);  // unaligned
  return x;
}

// Lane r of the result: the sum of p[r]'s sixteen lanes. Four rounds each halve the vectors,
// adding the two halves of every lane group of a pair (the classic transpose-and-add), which keeps
// lane order: 15 shuffle pairs and adds for sixteen sums instead of a full reduction each.
__attribute__((always_inline)) inline Vec16 sum_each(Vec16 (&p)[16]) {
  typedef int Mask16 __attribute__((vector_size(64)));
  const Mask16 lo[4] = {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
                        {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
                        {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29},
                        {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}};
  const Mask16 hi[4] = {{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
                        {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31},
                        {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31},
                        {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}};
  int n = 16;
#pragma GCC unroll 4
  for (int round = 0; round < 4; ++round) {
    n /= 2;
    for (int i = 0; i < n; ++i) {
      p[i] = __builtin_shuffle(p[2 * i], p[2 * i + 1], lo[round]) +
             __builtin_shuffle(p[2 * i], p[2 * i + 1], hi[round]);
    }
  }
  return p[0];
}

// One sequence's attention for the G query heads that share a kv head: every key row is read once
// for all G of them (GQA); the values, once per head from cache. q [G, hd], k and v [len, hd] rows,
// w scratch [G, len], out [G, hd] accumulated into (zeroed). HD > 0 fixes the head size at compile
// time, so the hd-long loops unroll and the output rows stay in registers across keys; HD = 0 reads
// it from `hd`.
template <int HD, bool Wide>
__attribute__((always_inline)) inline void attend_body(const float* q, const float* k,
                                                       const float* v, int64_t len, int64_t hd,
                                                       int64_t G, float sc, float* w, float* out) {
  const int64_t d = HD > 0 ? HD : hd;
  // Wide: the 16-float-vector paths, for head sizes that are whole vectors.
  constexpr bool kBlocked = Wide && HD > 0 && HD % 16 == 0;
  constexpr int kVectors = kBlocked ? HD / 16 : 1;
  int64_t done = 0;  // keys scored by the blocked path
  if constexpr (kBlocked) {
    // Sixteen keys at a time: each key's products with the query as whole vectors, then one
    // transposing reduction for all sixteen sums (a reduction per key cost more than its dot).
    done = len - len % 16;
    for (int64_t g = 0; g < G; ++g) {
      Vec16 qv[kVectors];
      for (int j = 0; j < kVectors; ++j) qv[j] = load16(q + g * d + 16 * j);
      for (int64_t l = 0; l < done; l += 16) {
        Vec16 p[16];
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) {
          const float* kl = k + (l + r) * d;
          p[r] = qv[0] * load16(kl);
#pragma GCC unroll 8
          for (int j = 1; j < kVectors; ++j) p[r] += qv[j] * load16(kl + 16 * j);
        }
        const Vec16 sums = sum_each(p) * sc;
        std::memcpy(w + g * len + l, &sums, sizeof sums);
      }
    }
  }
  for (int64_t l = done; l < len; ++l) {
    const float* kl = k + l * d;
    for (int64_t g = 0; g < G; ++g) {
      const float* qg = q + g * d;
      float s = 0;
      for (int64_t i = 0; i < d; ++i) s += qg[i] * kl[i];
      w[g * len + l] = s * sc;
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    float* wg = w + g * len;
    float mx = wg[0];
    for (int64_t l = 1; l < len; ++l) mx = std::max(mx, wg[l]);
    // exp in a loop of its own so that it vectorises (libmvec expf under -ffast-math).
    for (int64_t l = 0; l < len; ++l) wg[l] = std::exp(wg[l] - mx);
    float sum = 0;
    for (int64_t l = 0; l < len; ++l) sum += wg[l];
    const float inv = 1.0f / sum;
    for (int64_t l = 0; l < len; ++l) wg[l] *= inv;
  }
  for (int64_t g = 0; g < G; ++g) {
    const float* wg = w + g * len;
    if constexpr (kBlocked) {
      // The output row as HD / 16 whole vectors, named so that they stay in registers across
      // the keys (an array of floats was spilled to the stack and reloaded for every key).
      Vec16 acc[kVectors] = {};
      for (int64_t l = 0; l < len; ++l) {
        const float* vl = v + l * d;
        const float a = wg[l];
#pragma GCC unroll 8
        for (int j = 0; j < kVectors; ++j) acc[j] += a * load16(vl + 16 * j);
      }
      std::memcpy(out + g * d, acc, sizeof acc);
    } else {
      float acc[HD > 0 ? HD : 1];
      float* o = HD > 0 ? acc : out + g * d;
      if constexpr (HD > 0) std::fill(acc, acc + HD, 0.0f);
      for (int64_t l = 0; l < len; ++l) {
        const float* vl = v + l * d;
        const float a = wg[l];
        for (int64_t i = 0; i < d; ++i) o[i] += a * vl[i];
      }
      if constexpr (HD > 0) std::copy(acc, acc + HD, out + g * d);
    }
  }
}

// The loop nest as whole functions, so the inner loops inline and vectorise (-ffast-math lets
// them reassociate; see CMake) instead of costing a call per key per head; common head sizes get
// their own copies. Each is compiled for AVX-512 (16-float vectors are registers: the blocked
// paths of attend_body), and for AVX2 and baseline x86-64 without them (there GCC would build
// 16-float shuffles lane by lane, several times slower); attend_for picks per CPU.
#define STREAMRL_ATTEND(NAME, HD)                                                         \
  __attribute__((target("arch=x86-64-v4"))) void NAME##_avx512(                           \
      const float* q, const float* k, const float* v, int64_t len, int64_t hd, int64_t G, \
      float sc, float* w, float* out) {                                                   \
    attend_body<HD, true>(q, k, v, len, hd, G, sc, w, out);                               \
  }                                                                                       \
  __attribute__((target_clones("avx2", "default"))) void NAME(                            \
      const float* q, const float* k, const float* v, int64_t len, int64_t hd, int64_t G, \
      float sc, float* w, float* out) {                                                   \
    attend_body<HD, false>(q, k, v, len, hd, G, sc, w, out);                              \
  }
STREAMRL_ATTEND(attend_any, 0)
STREAMRL_ATTEND(attend_32, 32)
STREAMRL_ATTEND(attend_64, 64)
STREAMRL_ATTEND(attend_128, 128)
#undef STREAMRL_ATTEND

bool has_avx512() {
  // Every extension of x86-64-v4, the level those copies are built for.
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512cd") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return yes;
}

using AttendFn = void (*)(const float*, const float*, const float*, int64_t, int64_t, int64_t,
                          float, float*, float*);
AttendFn attend_for(int64_t hd) {
  const bool wide = has_avx512();
  switch (hd) {
    case 32:
      return wide ? attend_32_avx512 : attend_32;
    case 64:
      return wide ? attend_64_avx512 : attend_64;
    case 128:
      return wide ? attend_128_avx512 : attend_128;
    default:
      return wide ? attend_any_avx512 : attend_any;
  }
}

// Off the CPU (or in another dtype): gathers each row's slot up to the longest row, masks the
// positions past its own length and runs libtorch's fused attention (matmuls where it has none).
// Copies N x L keys, which the CPU kernel avoids, but stays on the device with no host sync.
torch::Tensor gathered_attention(const torch::Tensor& q, const torch::Tensor& k_cache,
                                 const torch::Tensor& v_cache, const torch::Tensor& slots,
                                 const torch::Tensor& lens, double scale, int64_t max_len) {
  const int64_t N = q.size(0), H = q.size(1), hd = q.size(2);
  const int64_t Hkv = k_cache.size(1), G = H / Hkv;
  const int64_t L = max_len > 0 ? max_len : lens.max().item<int64_t>();
  const torch::Tensor k = k_cache.narrow(2, 0, L).index_select(0, slots);  // [N, Hkv, L, hd]
  const torch::Tensor v = v_cache.narrow(2, 0, L).index_select(0, slots);
  const torch::Tensor qg = q.reshape({N, Hkv, G, hd});  // the G heads of kv head j are adjacent
  const torch::Tensor allowed =
      (torch::arange(L, lens.options()).view({1, L}) < lens.view({N, 1})).view({N, 1, 1, L});
#if STREAMRL_HAS_SDPA
  return at::scaled_dot_product_attention(qg, k, v, allowed, 0.0, false, scale).reshape({N, H, hd});
#else
  const torch::Tensor scores = torch::matmul(qg, k.transpose(-1, -2)).to(torch::kFloat32) * scale;
  const torch::Tensor probs =
      torch::softmax(scores.masked_fill(~allowed, -std::numeric_limits<float>::infinity()), -1);
  return torch::matmul(probs.to(v.scalar_type()), v).reshape({N, H, hd});
#endif
}

// The `keep` candidate blocks [0, window) of highest low-rank score, ascending, into `order`.
// q_lr: the G heads' rows [G, r]; k_lr: their caches [G, T, r]; a block scores the highest
// q_lr . k_lr over its keys and the G heads.
void select_blocks(const float* q_lr, const float* k_lr, int64_t G, int64_t T, int64_t r,
                   int64_t window, int64_t block, int64_t keep, std::vector<float>& score,
                   std::vector<int64_t>& order) {
  score.assign(window, std::numeric_limits<float>::lowest());  // fast-math: no infinities
  for (int64_t g = 0; g < G; ++g) {
    const float* ql = q_lr + g * r;
    const float* kl = k_lr + g * T * r;
    for (int64_t t = 0; t < window * block; ++t) {
      float s = 0;
      for (int64_t i = 0; i < r; ++i) s += ql[i] * kl[t * r + i];
      float& best = score[t / block];
      best = std::max(best, s);
    }
  }
  order.resize(window);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int64_t a, int64_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  order.resize(keep);
  std::sort(order.begin(), order.end());  // keys in position order, as the dense path reads them
}

void check_sparse_inputs(const torch::Tensor& q_lr, const torch::Tensor& k_lr_cache,
                         const SparseDecodeOptions& options) {
  TORCH_CHECK(q_lr.dim() == 3 && k_lr_cache.dim() == 4 && k_lr_cache.is_contiguous() &&
                  k_lr_cache.size(1) == q_lr.size(1) && k_lr_cache.size(3) == q_lr.size(2),
              "sparse decoding: needs q_lr [N, H, r] and k_lr_cache [S, H, T, r]");
  TORCH_CHECK(options.block > 0 && options.keep >= 0 && options.recent >= 0,
              "sparse decoding: block must be positive, keep and recent non-negative");
}

// What sparse decoding adds to the dense kernel's inputs.
struct LowRank {
  const float* q_lr;  // [N, H, r]
  const float* k_lr;  // [S, H, T, r]
  int64_t r;
  SparseDecodeOptions options;
};

// The CPU kernel of both paths: per row and kv head, the G query heads attend to every cached key
// or, with `low_rank` and a context long enough, to the selected blocks and the window (gathered
// into a scratch buffer, so the same attend loop runs over contiguous rows).
torch::Tensor attend_rows(const torch::Tensor& q, const torch::Tensor& k_cache,
                          const torch::Tensor& v_cache, const torch::Tensor& slots,
                          const torch::Tensor& lens, double scale, const LowRank* low_rank,
                          int64_t* attended) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4 && k_cache.is_contiguous() &&
                  v_cache.is_contiguous() && q.scalar_type() == torch::kFloat32,
              "decode_attention: bad shapes or layout");
  const torch::Tensor qc = q.contiguous();
  const int64_t N = q.size(0), H = q.size(1), hd = q.size(2);
  const int64_t Hkv = k_cache.size(1), T = k_cache.size(2), G = H / Hkv;
  torch::Tensor out = torch::zeros({N, H, hd});
  const float* qp = qc.data_ptr<float>();
  const float* kp = k_cache.data_ptr<float>();
  const float* vp = v_cache.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  const int64_t* lp = lens.data_ptr<int64_t>();
  const float sc = static_cast<float>(scale);
  const AttendFn attend_kv_head = attend_for(hd);
  std::atomic<int64_t> keys{0};
  at::parallel_for(0, N * Hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> w, kbuf, vbuf, score;
    std::vector<int64_t> order;
    int64_t local_keys = 0;
    for (int64_t task = begin; task < end; ++task) {
      // Query head h = j * G + g uses kv head j, so the G heads of j are contiguous in q.
      const int64_t n = task / Hkv, j = task % Hkv, len = lp[n];
      const int64_t base = ((sp[n] * Hkv + j) * T) * hd;
      const float* qn = qp + (n * H + j * G) * hd;
      float* on = op + (n * H + j * G) * hd;
      // Sparse: blocks [window, ...) hold the recent keys and are always attended; the blocks
      // before are the candidates.
      const SparseDecodeOptions* o = low_rank ? &low_rank->options : nullptr;
      const int64_t window = o ? std::max<int64_t>(0, len - o->recent) / o->block : 0;
      if (!o || window < o->keep) {
        w.resize(G * len);
        attend_kv_head(qn, kp + base, vp + base, len, hd, G, sc, w.data(), on);
        local_keys += len;
        continue;
      }
      const int64_t B = o->block, r = low_rank->r;
      select_blocks(low_rank->q_lr + (n * H + j * G) * r,
                    low_rank->k_lr + ((sp[n] * H + j * G) * T) * r, G, T, r, window, B, o->keep,
                    score, order);
      const int64_t tail = len - window * B, M = o->keep * B + tail;
      kbuf.resize(M * hd);
      vbuf.resize(M * hd);
      int64_t m = 0;
      auto take = [&](int64_t from, int64_t count) {
        std::copy_n(kp + base + from * hd, count * hd, kbuf.data() + m * hd);
        std::copy_n(vp + base + from * hd, count * hd, vbuf.data() + m * hd);
        m += count;
      };
      for (int64_t b : order) take(b * B, B);
      take(window * B, tail);
      w.resize(G * M);
      attend_kv_head(qn, kbuf.data(), vbuf.data(), M, hd, G, sc, w.data(), on);
      local_keys += M;
    }
    keys += local_keys;
  });
  if (attended) *attended = keys.load();
  return out;
}

}  // namespace

torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k_cache,
                               const torch::Tensor& v_cache, const torch::Tensor& slots,
                               const torch::Tensor& lens, double scale, int64_t max_len) {
  if (!q.is_cpu() || q.scalar_type() != torch::kFloat32) {
    return gathered_attention(q, k_cache, v_cache, slots, lens, scale, max_len);
  }
  return attend_rows(q, k_cache, v_cache, slots, lens, scale, nullptr, nullptr);
}

torch::Tensor sparse_decode_key_mask(const torch::Tensor& q_lr, const torch::Tensor& k_lr_cache,
                                     int64_t kv_heads, const torch::Tensor& slots,
                                     const torch::Tensor& lens,
                                     const SparseDecodeOptions& options) {
  check_sparse_inputs(q_lr, k_lr_cache, options);
  const torch::Tensor qlc = q_lr.to(torch::kFloat32).contiguous();
  const torch::Tensor klc = k_lr_cache.to(torch::kFloat32).contiguous();
  const int64_t N = q_lr.size(0), H = q_lr.size(1), r = q_lr.size(2), T = k_lr_cache.size(2);
  const int64_t G = H / kv_heads, B = options.block;
  const torch::Tensor lc = lens.to(torch::kLong).cpu().contiguous();
  const int64_t L = N > 0 ? lc.max().item<int64_t>() : 0;
  torch::Tensor mask = torch::zeros({N, kv_heads, L}, torch::kBool);
  auto m = mask.accessor<bool, 3>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  const int64_t* lp = lc.data_ptr<int64_t>();
  std::vector<float> score;
  std::vector<int64_t> order;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t len = lp[n], window = std::max<int64_t>(0, len - options.recent) / B;
    for (int64_t j = 0; j < kv_heads; ++j) {
      if (window < options.keep) {
        for (int64_t t = 0; t < len; ++t) m[n][j][t] = true;
        continue;
      }
      select_blocks(qlc.data_ptr<float>() + (n * H + j * G) * r,
                    klc.data_ptr<float>() + ((sp[n] * H + j * G) * T) * r, G, T, r, window, B,
                    options.keep, score, order);
      for (int64_t b : order) {
        for (int64_t t = b * B; t < (b + 1) * B; ++t) m[n][j][t] = true;
      }
      for (int64_t t = window * B; t < len; ++t) m[n][j][t] = true;
    }
  }
  return mask;
}

torch::Tensor sparse_decode_attention(const torch::Tensor& q, const torch::Tensor& k_cache,
                                      const torch::Tensor& v_cache, const torch::Tensor& q_lr,
                                      const torch::Tensor& k_lr_cache, const torch::Tensor& slots,
                                      const torch::Tensor& lens, double scale,
                                      const SparseDecodeOptions& options, int64_t* attended) {
  check_sparse_inputs(q_lr, k_lr_cache, options);
  TORCH_CHECK(q.is_cpu() && q.scalar_type() == torch::kFloat32 && q.size(0) == q_lr.size(0) &&
                  q.size(1) == q_lr.size(1) && k_lr_cache.size(2) == k_cache.size(2),
              "sparse_decode_attention: needs CPU float q [N, H, hd] and caches [S, Hkv, T, hd] "
              "matching q_lr and k_lr_cache");
  const torch::Tensor qlc = q_lr.to(torch::kFloat32).contiguous();
  const torch::Tensor klc = k_lr_cache.to(torch::kFloat32).contiguous();
  const LowRank low_rank{qlc.data_ptr<float>(), klc.data_ptr<float>(), q_lr.size(2), options};
  return attend_rows(q, k_cache, v_cache, slots, lens, scale, &low_rank, attended);
}

}  // namespace streamrl::model
