#include "streamrl/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "streamrl/core/device.h"
#include "streamrl/model/decode_attention.h"
#include "streamrl/model/fused_linear.h"
#include "streamrl/model/kv_cache.h"
#include "streamrl/model/swiglu.h"
#include "streamrl/sparse/block_sparse_attention.h"

namespace streamrl::model {
namespace {

using torch::Tensor;
using torch::indexing::Slice;

// A module holding one named parameter, so that HF names like "input_layernorm.weight" come out of
// the module tree (parameter names cannot contain dots).
std::shared_ptr<torch::nn::Module> param_holder(const Tensor& value, Tensor* out) {
  auto m = std::make_shared<torch::nn::Module>();
  *out = m->register_parameter("weight", value);
  return m;
}

torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  // Llama/Qwen2 RMSNorm: normalise in fp32, then scale in the activations' dtype (as HF does).
  if (x.scalar_type() == torch::kFloat32) {
    return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
  }
  const Tensor xf = x.to(torch::kFloat32);
  return (xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type()) *
         weight;
}

Tensor rotate_half(const Tensor& x) {
  int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// x [B, T, heads, hd]; cos/sin [B, T, 1, hd] fp32, cast to x's dtype first (HF's order). HF's
// non-interleaved rotary convention.
Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  if (x.scalar_type() != cos.scalar_type()) {
    return x * cos.to(x.scalar_type()) + rotate_half(x) * sin.to(x.scalar_type());
  }
  return x * cos + rotate_half(x) * sin;
}

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// Training-path rows at least this long attend one at a time on the CPU, in query tiles against
// the keys up to each tile (sparse::dense_causal_attention): the batched form's masked [T, T]
// scores, mask and softmax cost more in memory traffic than in FLOPs there. A whole step of
// configs/model/tiny.json on one row (bench sparse_attention's training_step, one thread): 0.20 s
// batched vs 0.25 s tiled at 1k tokens, 0.47 s both at 2k, 12.6 s vs 1.9 s at 4k.
constexpr int64_t kTiledRowTokens = 2048;

// A padded training batch whose batched scores ([B, H, T, T] floats) pass this many bytes attends
// row by row as well, every row on its valid span: past glibc's 32 MiB mmap threshold each score,
// mask and softmax tensor is a fresh mapping whose pages fault in, and every row pays for the
// longest. Three rows padded to 1216 tokens (configs/model/tiny.json width, 4 layers, one thread,
// both pipeline stages busy): 2.0-3.6 s per forward or backward batched, a 1216-token row alone
// 0.3 s (bench pipeline's static 1F1B micro-batches).
constexpr int64_t kBatchedScoreBytes = int64_t{32} << 20;

// Whether a CPU row of S valid tokens attends on its own in a batch of B rows padded to T with H
// query heads.
bool tiled_row(int64_t S, int64_t B, int64_t T, int64_t H, bool cpu) {
  if (!cpu || S <= 0) return false;
  return S >= kTiledRowTokens || B * H * T * T * int64_t{4} > kBatchedScoreBytes;
}

// The training path's mask from allowed [B, T, L] bool: kept boolean for libtorch's fused
// attention off the CPU (it picks flash or memory-efficient kernels by shape and dtype), else
// additive [B, 1, 1, T, L] (broadcast over kv heads and group members) for the matmul form the
// CPU has always used. Built once per forward, used by every layer.
Tensor attention_mask(const Tensor& allowed) {
#if STREAMRL_HAS_SDPA
  if (!allowed.is_cpu()) return allowed;
#endif
  return torch::zeros(allowed.sizes(), allowed.options().dtype(torch::kFloat32))
      .masked_fill_(~allowed, kMasked)
      .unsqueeze(1)
      .unsqueeze(1);
}

// Scaled dot-product attention. qg [b, Hkv, G*T, hd] (group members folded into the query
// dimension), keys/vals [b, Hkv, L, hd], mask from attention_mask. Returns [b, Hkv, G*T, hd].
Tensor attend(const Tensor& qg, const Tensor& keys, const Tensor& vals, const Tensor& mask,
              double scale, int64_t G, int64_t T) {
  const int64_t b = qg.size(0), Hkv = qg.size(1), L = keys.size(2);
#if STREAMRL_HAS_SDPA
  if (mask.scalar_type() == torch::kBool) {
    const Tensor m =
        mask.unsqueeze(1).unsqueeze(1).expand({b, 1, G, T, L}).reshape({b, 1, G * T, L});
    return at::scaled_dot_product_attention(qg, keys, vals, m, 0.0, false, scale);
  }
#endif
  Tensor scores = torch::matmul(qg, keys.transpose(-1, -2)).mul_(scale).view({b, Hkv, G, T, L});
  Tensor probs = torch::softmax(scores + mask, -1).view({b, Hkv, G * T, L});
  return torch::matmul(probs.to(vals.scalar_type()), vals);
}

// Grouped-query attention of a padded batch without copying keys per query head: q [B, T, H, hd],
// k and v [B, T, Hkv, hd]; query head h = j*G + g uses kv head j, so the G group members are folded
// into the query-length dimension. Returns [B, T, H * hd].
Tensor batched_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                         double scale) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), Hkv = k.size(2), hd = q.size(3);
  const int64_t G = H / Hkv;
  const Tensor qg =
      q.view({B, T, Hkv, G, hd}).permute({0, 2, 3, 1, 4}).reshape({B, Hkv, G * T, hd});
  const Tensor out = attend(qg, k.transpose(1, 2), v.transpose(1, 2), mask, scale, G, T);
  return out.view({B, Hkv, G, T, hd}).permute({0, 3, 1, 2, 4}).reshape({B, T, H * hd});
}

}  // namespace

// One decoder block. Submodule and parameter names follow HF so named_parameters() are HF names.
struct CausalLMImpl::Layer : torch::nn::Module {
  Layer(const ModelConfig& c, int64_t index) {
    auto attn = register_module("self_attn", std::make_shared<torch::nn::Module>());
    const int64_t d = c.hidden_size, hd = c.head_dim;
    q_proj = attn->register_module("q_proj",
                                   make_linear(d, c.num_attention_heads * hd, c.attention_bias));
    k_proj = attn->register_module("k_proj",
                                   make_linear(d, c.num_key_value_heads * hd, c.attention_bias));
    v_proj = attn->register_module("v_proj",
                                   make_linear(d, c.num_key_value_heads * hd, c.attention_bias));
    o_proj =
        attn->register_module("o_proj", make_linear(c.num_attention_heads * hd, d, c.o_proj_bias));
    if (c.qk_norm) {
      attn->register_module("q_norm", param_holder(torch::ones({hd}), &q_norm));
      attn->register_module("k_norm", param_holder(torch::ones({hd}), &k_norm));
    }
    if (c.moe_layer(index)) {
      moe = register_module(MoeBlockImpl::module_name(c), MoeBlock(c));
    } else {
      auto mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
      gate_proj =
          mlp->register_module("gate_proj", make_linear(d, c.intermediate_size, c.mlp_bias));
      up_proj = mlp->register_module("up_proj", make_linear(d, c.intermediate_size, c.mlp_bias));
      down_proj =
          mlp->register_module("down_proj", make_linear(c.intermediate_size, d, c.mlp_bias));
    }
    register_module("input_layernorm", param_holder(torch::ones({d}), &input_norm));
    register_module("post_attention_layernorm", param_holder(torch::ones({d}), &post_norm));
    qkv = std::make_unique<FusedLinear>(std::vector<torch::nn::Linear>{q_proj, k_proj, v_proj});
    out = std::make_unique<FusedLinear>(std::vector<torch::nn::Linear>{o_proj});
    if (!moe) {
      gate_up = std::make_unique<FusedLinear>(std::vector<torch::nn::Linear>{gate_proj, up_proj});
      down = std::make_unique<FusedLinear>(std::vector<torch::nn::Linear>{down_proj});
    }
  }

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};  // dense layers
  MoeBlock moe{nullptr};                                                       // MoE layers
  Tensor input_norm, post_norm;                                                // [D]
  Tensor q_norm, k_norm;  // [head_dim], Qwen3 only
  // The inference path's fused (and packed) projections (small models on the CPU; see
  // fuse_inference_).
  std::unique_ptr<FusedLinear> qkv, gate_up, out, down;
};

// Where the inference path stores new keys/values: flat (slot, position) pairs of valid tokens and
// the rows of the flattened [B*T] batch they come from. Computed once per forward, used per layer.
struct CausalLMImpl::KvWrite {
  Tensor slot;             // [N] int64 cache slot of each valid token
  Tensor pos;              // [N] int64 its position
  Tensor len;              // [N] int64 pos + 1: the positions it attends to
  Tensor src;              // [N] int64 its index in the flattened [B*T] batch
  int64_t max_len = 0;     // the largest len
  bool all_valid = false;  // src is 0..B*T-1
};

CausalLMImpl::CausalLMImpl(const ModelConfig& config, uint64_t seed) : config_(config) {
  config_.validate();
  const ModelConfig& c = config_;
  auto backbone = register_module("model", std::make_shared<torch::nn::Module>());
  embed_tokens_ =
      backbone->register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  auto list = backbone->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers_.push_back(std::make_shared<Layer>(c, i));
    list->push_back(layers_.back());
  }
  backbone->register_module("norm", param_holder(torch::ones({c.hidden_size}), &final_norm_));
  if (!c.tie_word_embeddings) {
    auto head = register_module("lm_head", make_linear(c.hidden_size, c.vocab_size, false));
    lm_head_ = head->weight;
  }

  // Deterministic init from our own generator: matrices N(0, initializer_range), biases 0.
  auto gen = at::detail::createCPUGenerator(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters()) {
    const std::string& name = p.key();
    if (name.ends_with("layernorm.weight") || name.ends_with("_norm.weight") ||
        name == "model.norm.weight") {
      continue;
    }
    if (p.value().dim() == 1) {
      p.value().zero_();
    } else {
      p.value().normal_(0.0, c.initializer_range, gen);
    }
  }

  // Fused projections cost a second copy of the layers' weights (packed for XNNPACK where libtorch
  // has it); worth it where GEMM calls, not FLOPs, dominate a decode step (hidden sizes up to
  // ~1k), not for large models.
  const int64_t fused_elements =
      c.hidden_size *
      ((c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim + 2 * c.intermediate_size);
  fuse_inference_ = fused_elements <= (int64_t{4} << 20);
  // RoPE tables for every position the config allows: angle[p, i] = p * inv_freq[i mod hd/2].
  auto inv_freq = torch::tensor(c.rope_inv_freq(), torch::kFloat64);
  auto pos = torch::arange(c.max_position_embeddings, torch::kFloat64);
  auto angles = torch::outer(pos, inv_freq);
  auto emb = torch::cat({angles, angles}, -1);
  rope_cos_ = emb.cos().to(torch::kFloat32);
  rope_sin_ = emb.sin().to(torch::kFloat32);
}

Tensor CausalLMImpl::run(const Tensor& tokens, const Tensor& positions, const Tensor& mask,
                         KVCache* cache, const KvWrite* write,
                         std::vector<MoeLayerTrace>* moe_traces, const std::vector<Tensor>* forced,
                         bool apply_forced, std::vector<AttentionCapture>* capture,
                         const LayerSpan& span,
                         const std::vector<std::pair<int64_t, int64_t>>* rows) {
  const ModelConfig& c = config_;
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int64_t H = c.num_attention_heads, Hkv = c.num_key_value_heads, hd = c.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  Tensor flat_pos = positions.reshape({-1});
  Tensor cos = rope_cos_.index_select(0, flat_pos).view({B, T, 1, hd});
  Tensor sin = rope_sin_.index_select(0, flat_pos).view({B, T, 1, hd});

  const Tensor attn_mask = mask.defined() ? attention_mask(mask) : mask;  // training path only
  Tensor h = span.input.defined() ? span.input : embed_tokens_->forward(tokens);  // [B, T, D]
  const size_t first = static_cast<size_t>(span.first);
  const size_t end = span.end < 0 ? layers_.size() : static_cast<size_t>(span.end);
  // Routing replay lists every MoE layer of the model; a pipeline stage starts part-way.
  size_t moe_index = static_cast<size_t>(c.moe_layers_before(static_cast<int64_t>(first)));
  const bool fuse =
      cache != nullptr && fuse_inference_ && h.is_cpu() && !torch::GradMode::is_enabled();
  for (size_t li = first; li < end; ++li) {
    Layer& layer = *layers_[li];
    Tensor x = rms_norm(h, layer.input_norm, c.rms_norm_eps);
    Tensor q, k, v;
    if (fuse) {
      const Tensor qkv = layer.qkv->forward(x);  // [B, T, (H + 2 Hkv) hd]
      q = qkv.narrow(-1, 0, H * hd).view({B, T, H, hd});
      k = qkv.narrow(-1, H * hd, Hkv * hd).view({B, T, Hkv, hd});
      v = qkv.narrow(-1, (H + Hkv) * hd, Hkv * hd).view({B, T, Hkv, hd});
    } else {
      q = layer.q_proj->forward(x).view({B, T, H, hd});
      k = layer.k_proj->forward(x).view({B, T, Hkv, hd});
      v = layer.v_proj->forward(x).view({B, T, Hkv, hd});
    }
    if (layer.q_norm.defined()) {  // Qwen3: per-head RMSNorm before RoPE
      q = rms_norm(q, layer.q_norm, c.rms_norm_eps);
      k = rms_norm(k, layer.k_norm, c.rms_norm_eps);
    }
    q = apply_rope(q, cos, sin);
    k = apply_rope(k, cos, sin);
    if (capture) capture->push_back({x.detach(), q.detach(), k.detach()});

    Tensor attn;  // [B, T, H*hd]
    if (cache == nullptr && rows) {
      attn = row_attention(li, x, q, k, v, *rows, attn_mask, scale);
    } else if (cache == nullptr) {
      attn = batched_attention(q, k, v, attn_mask, scale);
    } else {
      Tensor& ck = cache->keys(li);  // [S, Hkv, max_tokens, hd]
      Tensor& cv = cache->values(li);
      // In the cache's dtype (a no-op unless autocast or the caller chose another).
      Tensor kf = k.reshape({B * T, Hkv, hd}).to(ck.scalar_type());
      Tensor vf = v.reshape({B * T, Hkv, hd}).to(ck.scalar_type());
      Tensor qf = q.reshape({B * T, H, hd}).to(ck.scalar_type());
      if (!write->all_valid) {
        kf = kf.index_select(0, write->src);
        vf = vf.index_select(0, write->src);
        qf = qf.index_select(0, write->src);
      }
      // Written through a [S, max_tokens, Hkv, hd] view, where a (slot, pos) pair addresses one
      // position of every head. All of this forward's tokens are cached before any attends, so
      // prompt tokens packed into one forward see each other.
      ck.transpose(1, 2).index_put_({write->slot, write->pos}, kf);
      cv.transpose(1, 2).index_put_({write->slot, write->pos}, vf);
      Tensor o;  // [N, H, hd]
      if (sparse_ && qf.is_cpu() && qf.scalar_type() == torch::kFloat32 &&
          sparse_heads_[li].all().item<bool>()) {
        // Low-rank queries and keys of the new tokens; the keys cached like the real ones.
        torch::NoGradGuard no_grad;  // the predictors learn only in fit_sparse_predictors
        auto [q_lr, k_lr] = predictors_[li]->forward(x.reshape({B * T, -1}));  // [H, B*T, r]
        q_lr = q_lr.transpose(0, 1);
        k_lr = k_lr.transpose(0, 1);
        if (!write->all_valid) {
          q_lr = q_lr.index_select(0, write->src);
          k_lr = k_lr.index_select(0, write->src);
        }
        Tensor& lk = cache->lowrank_keys(li, H, sparse_->rank);
        lk.transpose(1, 2).index_put_({write->slot, write->pos}, k_lr);
        o = sparse_decode_attention(qf, ck, cv, q_lr.contiguous(), lk, write->slot, write->len,
                                    scale, sparse_->decode);
      } else {
        o = decode_attention(qf, ck, cv, write->slot, write->len, scale, write->max_len);
      }
      if (!write->all_valid) {
        o = torch::zeros({B * T, H, hd}, o.options()).index_copy_(0, write->src, o);
      }
      attn = o.view({B, T, H * hd});
    }
    h = h + (fuse ? layer.out->forward(attn) : layer.o_proj->forward(attn));

    Tensor y = rms_norm(h, layer.post_norm, c.rms_norm_eps);
    Tensor mlp;
    if (layer.moe) {
      MoeLayerTrace* trace = nullptr;
      if (moe_traces) trace = &moe_traces->emplace_back();
      const Tensor replay = forced && moe_index < forced->size()
                                ? (*forced)[moe_index].to(y.device()).reshape({B * T, -1})
                                : Tensor();
      ++moe_index;
      mlp = layer.moe->forward(y.reshape({B * T, -1}), gating_, trace, replay, apply_forced)
                .view(y.sizes());
    } else if (fuse) {
      mlp = layer.down->forward(swiglu(layer.gate_up->forward(y)));
    } else {
      mlp = layer.down_proj->forward(torch::silu(layer.gate_proj->forward(y)) *
                                     layer.up_proj->forward(y));
    }
    h = h + mlp;
  }
  return end == layers_.size() ? rms_norm(h, final_norm_, c.rms_norm_eps) : h;
}

Tensor CausalLMImpl::output_logits(const Tensor& hidden) {
  return torch::linear(hidden, lm_head_.defined() ? lm_head_ : embed_tokens_->weight);
}

ScoreOutput CausalLMImpl::score(const Tensor& tokens, const Tensor& valid,
                                const ScoreOptions& options) {
  return score_layers(tokens, valid, Tensor(), 0, static_cast<int>(layers_.size()), options).score;
}

StageOutput CausalLMImpl::score_layers(const Tensor& tokens, const Tensor& valid,
                                       const Tensor& input, int first, int end,
                                       const ScoreOptions& options) {
  TORCH_CHECK(tokens.dim() == 2 && valid.sizes() == tokens.sizes(),
              "score: tokens and valid must both be [B, T], got ", tokens.sizes(), " and ",
              valid.sizes());
  const int layers = static_cast<int>(layers_.size());
  TORCH_CHECK(0 <= first && first < end && end <= layers, "score_layers: layers [", first, ", ",
              end, ") of ", layers);
  TORCH_CHECK(first == 0 || input.defined(), "score_layers: layer ", first,
              " needs the previous stage's hidden states");
  const int64_t T = tokens.size(1);
  const Tensor tokens_d = tokens.to(device());
  Tensor valid_b = valid.to(device()).to(torch::kBool);
  // Positions count valid tokens before each one, so left padding does not shift RoPE.
  Tensor positions = (valid_b.to(torch::kLong).cumsum(1) - 1).clamp_min(0);

  std::vector<MoeLayerTrace> traces;
  if (options.replay_routing) {
    TORCH_CHECK(config_.is_moe(), "score: routing replay needs an MoE model");
  }
  AutocastGuard autocast(device(), autocast_dtype_);
  StageOutput stage;
  // Each row's valid span (start, length) when some attend one sequence at a time: sparse heads,
  // and long rows on the CPU (tiled causal attention instead of the masked [T, T] matrices).
  std::vector<std::pair<int64_t, int64_t>> rows;
  const int64_t B = tokens.size(0), H = config_.num_attention_heads;
  const bool by_row = sparse_ || tiled_row(T, B, T, H, tokens_d.is_cpu());
  if (by_row) {
    const Tensor v = valid_b.to(torch::kCPU);
    const Tensor count = v.sum(1), start = v.to(torch::kLong).argmax(1);
    for (int64_t b = 0; b < v.size(0); ++b) {
      rows.emplace_back(start[b].item<int64_t>(), count[b].item<int64_t>());
    }
  }
  // Key j is visible to query i when j <= i and j is a real token. A padding query sees itself
  // only, which keeps its softmax finite; its output is discarded. Not built when every row
  // attends on its own (the [B, T, T] mask is what long rows avoid).
  const bool all_tiled =
      by_row && tokens_d.is_cpu() && std::all_of(rows.begin(), rows.end(), [&](const auto& r) {
        return tiled_row(r.second, B, T, H, true);
      });
  Tensor allowed;
  if (!all_tiled) {
    Tensor idx = torch::arange(T, tokens_d.options().dtype(torch::kLong));
    Tensor causal = idx.view({1, T}) <= idx.view({T, 1});  // [T, T]
    allowed = causal.unsqueeze(0) & valid_b.unsqueeze(1);  // [B, T, T]
    allowed = allowed | torch::eye(T, valid_b.options()).unsqueeze(0);
  }
  stage.hidden =
      run(tokens_d, positions, allowed, nullptr, nullptr, &traces, options.replay_routing,
          options.replay_apply, options.capture, {first, end, input}, by_row ? &rows : nullptr);
  std::optional<MoeAuxLosses> moe;
  if (config_.is_moe() && (!traces.empty() || first == 0)) {
    moe = moe_aux_losses(traces, valid_b, config_.num_experts);
    moe->first_layer = config_.moe_layers_before(first);
  }
  if (end < layers) {
    stage.moe = std::move(moe);
    return stage;
  }
  const Tensor& hidden = stage.hidden;
  // [B, T, V]; position t predicts token t+1. Log-prob and loss maths in fp32 whatever the
  // weights' or autocast's dtype.
  Tensor logits = output_logits(hidden).to(torch::kFloat32);
  TORCH_CHECK(options.temperature > 0, "score: temperature must be > 0, got ", options.temperature);
  Tensor shifted = logits.narrow(1, 0, T - 1);
  if (options.temperature != 1.0) shifted = shifted / options.temperature;
  Tensor logp = torch::log_softmax(shifted, -1);
  Tensor target = tokens_d.narrow(1, 1, T - 1).unsqueeze(-1);
  // A target counts only when it and its predecessor are valid (the first token has no context).
  Tensor scored = valid_b.narrow(1, 1, T - 1) & valid_b.narrow(1, 0, T - 1);
  Tensor lp = logp.gather(-1, target).squeeze(-1).masked_fill(~scored, 0.0);

  ScoreOutput& out = stage.score;
  out.logprobs = torch::cat({torch::zeros({tokens.size(0), 1}, lp.options()), lp}, 1);
  if (options.return_entropy) {
    Tensor ent = -(logp.exp() * logp).sum(-1).masked_fill(~scored, 0.0);
    out.entropy = torch::cat({torch::zeros({tokens.size(0), 1}, ent.options()), ent}, 1);
  }
  if (options.return_logits) out.logits = logits;
  out.moe = std::move(moe);
  return stage;
}

Tensor CausalLMImpl::forward_cached(const Tensor& tokens, const Tensor& positions,
                                    const Tensor& valid, const Tensor& slots, KVCache& cache,
                                    std::vector<Tensor>* routing) {
  TORCH_CHECK(tokens.dim() == 2 && positions.sizes() == tokens.sizes() &&
                  valid.sizes() == tokens.sizes() && slots.dim() == 1 &&
                  slots.size(0) == tokens.size(0),
              "forward_cached: tokens/positions/valid must be [B, T] and slots [B], got ",
              tokens.sizes(), positions.sizes(), valid.sizes(), slots.sizes());
  const int64_t B = tokens.size(0), T = tokens.size(1);
  Tensor valid_b = valid.to(torch::kBool);
  Tensor pos = positions.masked_fill(~valid_b, 0);
  const int64_t kv_len = pos.max().item<int64_t>() + 1;
  TORCH_CHECK(kv_len <= cache.max_tokens() && kv_len <= config_.max_position_embeddings,
              "forward_cached: position ", kv_len - 1, " exceeds the cache (", cache.max_tokens(),
              ") or the model (", config_.max_position_embeddings, ")");

  TORCH_CHECK(slots.min().item<int64_t>() >= 0 && slots.max().item<int64_t>() < cache.num_slots(),
              "forward_cached: slots ", slots, " outside the cache's ", cache.num_slots(),
              " slots");
  // The write plan is computed where the caller built its inputs (the engine: on the host, so the
  // checks above cost no device synchronisation), then moved to the weights' device.
  KvWrite write;
  Tensor flat_valid = valid_b.reshape({-1});
  write.all_valid = flat_valid.all().item<bool>();
  write.src =
      write.all_valid ? torch::arange(B * T, pos.options()) : flat_valid.nonzero().squeeze(1);
  write.slot = slots.view({B, 1}).expand({B, T}).reshape({-1}).index_select(0, write.src);
  write.pos = pos.reshape({-1}).index_select(0, write.src);
  write.max_len = kv_len;
  const torch::Device dev = device();
  for (Tensor* t : {&write.src, &write.slot, &write.pos}) *t = t->to(dev, /*non_blocking=*/true);
  write.len = write.pos + 1;
  valid_b = valid_b.to(dev, true);
  pos = pos.to(dev, true);

  std::vector<MoeLayerTrace> traces;
  AutocastGuard autocast(dev, autocast_dtype_);
  Tensor hidden = run(tokens.to(dev, true), pos, Tensor(), &cache, &write,
                      routing && config_.is_moe() ? &traces : nullptr);  // [B, T, D]
  if (routing) {
    routing->clear();
    for (const auto& t : traces) routing->push_back(routing_ids(t.routing));
  }
  // Last valid token of each row: valid tokens are contiguous, so it is the row's highest index.
  Tensor idx = torch::arange(T, pos.options()).view({1, T}).expand({B, T});
  Tensor last = idx.masked_fill(~valid_b, -1).amax(1);                    // [B]
  Tensor h_last = hidden.index({torch::arange(B, pos.options()), last});  // [B, D]
  return output_logits(h_last);
}

Tensor CausalLMImpl::row_attention(size_t li, const Tensor& x, const Tensor& q, const Tensor& k,
                                   const Tensor& v,
                                   const std::vector<std::pair<int64_t, int64_t>>& rows,
                                   const Tensor& mask, double scale) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), Hkv = k.size(2), hd = q.size(3);
  const int64_t G = H / Hkv;
  const bool any_sparse = sparse_ && sparse_heads_[li].any().item<bool>();
  const bool all_sparse = any_sparse && sparse_heads_[li].all().item<bool>();
  Tensor sparse_idx, dense_idx, order;  // only a layer with both kinds of heads splits them
  if (any_sparse && !all_sparse) {
    sparse_idx = sparse_heads_[li].nonzero().squeeze(1).to(q.device());
    dense_idx = (~sparse_heads_[li]).nonzero().squeeze(1).to(q.device());
    // Sparse and dense head outputs are concatenated; this puts them back in head order.
    order = torch::cat({sparse_idx, dense_idx}).argsort();
  }
  std::vector<Tensor> out(static_cast<size_t>(B));
  std::vector<int64_t> short_rows;
  for (int64_t b = 0; b < B; ++b) {
    const auto [s, S] = rows[static_cast<size_t>(b)];
    const bool sparse_row = any_sparse && S >= sparse_->min_tokens && S > 0;
    if (!sparse_row && !tiled_row(S, B, T, H, q.is_cpu())) {
      short_rows.push_back(b);
      continue;
    }
    const Tensor qb = q[b].narrow(0, s, S).transpose(0, 1);  // [H, S, hd]
    const Tensor kb = k[b].narrow(0, s, S).transpose(0, 1);  // [Hkv, S, hd]
    const Tensor vb = v[b].narrow(0, s, S).transpose(0, 1);
    auto place = [&](const Tensor& o) {  // [H, S, hd] -> the row's [T, H * hd], zero padding
      out[static_cast<size_t>(b)] =
          torch::constant_pad_nd(o.transpose(0, 1).reshape({S, H * hd}), {0, 0, s, T - s - S});
    };
    if (!sparse_row) {
      place(sparse::dense_causal_attention(qb, kb, vb, scale));
      continue;
    }
    Tensor blocks;
    {
      torch::NoGradGuard no_grad;  // the predictors learn only in their own trainer
      auto [q_lr, k_lr] = predictors_[li]->forward(x[b].narrow(0, s, S).to(torch::kFloat32));
      blocks = sparse::select_key_blocks(q_lr, k_lr, sparse_->train);
    }
    Tensor o;  // [H, S, hd]
    if (all_sparse) {
      o = sparse::block_sparse_attention(qb, kb, vb, blocks, sparse_->train.block, scale);
    } else {
      // Keys and values per query head (head h = j*G + g reads kv head j), split by head kind.
      auto per_head = [&](const Tensor& t) {
        return t.unsqueeze(1).expand({Hkv, G, S, hd}).reshape({H, S, hd});
      };
      const Tensor kh = per_head(kb), vh = per_head(vb);
      const Tensor os = sparse::block_sparse_attention(
          qb.index_select(0, sparse_idx), kh.index_select(0, sparse_idx),
          vh.index_select(0, sparse_idx), blocks.index_select(0, sparse_idx.to(blocks.device())),
          sparse_->train.block, scale);
      const Tensor od = sparse::dense_causal_attention(qb.index_select(0, dense_idx),
                                                       kh.index_select(0, dense_idx),
                                                       vh.index_select(0, dense_idx), scale);
      o = torch::cat({os, od}).index_select(0, order);
    }
    place(o);
  }
  if (static_cast<int64_t>(short_rows.size()) == B) return batched_attention(q, k, v, mask, scale);
  if (!short_rows.empty()) {
    const Tensor idx = torch::tensor(short_rows, torch::kLong).to(q.device());
    const Tensor o = batched_attention(q.index_select(0, idx), k.index_select(0, idx),
                                       v.index_select(0, idx), mask.index_select(0, idx), scale);
    for (size_t i = 0; i < short_rows.size(); ++i) out[static_cast<size_t>(short_rows[i])] = o[i];
  }
  return torch::stack(out);
}

void CausalLMImpl::enable_sparse_attention(const SparseAttentionConfig& config, uint64_t seed,
                                           bool all_heads) {
  TORCH_CHECK(config.rank > 0 && config.decode.block > 0 && config.decode.keep >= 0 &&
                  config.decode.recent >= 0,
              "sparse attention: rank and block must be positive, keep and recent non-negative");
  TORCH_CHECK(
      config.train.block > 0 && config.train.keep > config.train.recent &&
          config.train.recent >= 0 && config.min_tokens >= 0,
      "sparse attention: train block must be positive, keep > recent >= 0, min_tokens >= 0");
  predictors_.clear();
  sparse_heads_.clear();
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    predictors_.emplace_back(config_.hidden_size, config_.num_attention_heads, config.rank,
                             seed + static_cast<uint64_t>(l));
    predictors_.back()->to(device());
    sparse_heads_.push_back(torch::full({config_.num_attention_heads}, all_heads, torch::kBool));
  }
  sparse_ = config;
}

void CausalLMImpl::set_sparse_heads(size_t layer, const Tensor& heads) {
  TORCH_CHECK(sparse_, "set_sparse_heads: sparse attention is not enabled");
  TORCH_CHECK(heads.dim() == 1 && heads.size(0) == config_.num_attention_heads,
              "set_sparse_heads: expected [", config_.num_attention_heads, "] heads, got ",
              heads.sizes());
  sparse_heads_.at(layer) = heads.to(torch::kCPU, torch::kBool).clone();
}

std::vector<AttentionCapture> CausalLMImpl::capture_attention(const Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2, "capture_attention: tokens must be [B, T], got ", tokens.sizes());
  torch::NoGradGuard no_grad;
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const Tensor tokens_d = tokens.to(device());
  const Tensor positions =
      torch::arange(T, tokens_d.options().dtype(torch::kLong)).view({1, T}).expand({B, T});
  const Tensor idx = torch::arange(T, tokens_d.options().dtype(torch::kLong));
  const Tensor causal = (idx.view({1, T}) <= idx.view({T, 1})).unsqueeze(0).expand({B, T, T});
  std::vector<AttentionCapture> out;
  run(tokens_d, positions, causal, nullptr, nullptr, nullptr, nullptr, true, &out);
  return out;
}

torch::Device CausalLMImpl::device() const { return embed_tokens_->weight.device(); }

torch::ScalarType CausalLMImpl::dtype() const { return embed_tokens_->weight.scalar_type(); }

torch::ScalarType CausalLMImpl::compute_dtype() const {
  return device().is_cuda() && autocast_dtype_ != torch::kFloat32 ? autocast_dtype_ : dtype();
}

void CausalLMImpl::place(const torch::Device& device, torch::ScalarType dtype) {
  to(device, dtype);
  for (auto& p : predictors_) p->to(device);  // fp32: the sparse kernel scores in float
  rope_cos_ = rope_cos_.to(device);
  rope_sin_ = rope_sin_.to(device);
}

void place_for_inference(CausalLM& model, const std::string& device, const std::string& dtype,
                         const std::string& what) {
  const torch::Device d = core::parse_device(device, what);
  model->place(d, core::compute_dtype(dtype, d, what == "--device" ? "--dtype" : "model.dtype"));
}

std::vector<std::pair<std::string, Tensor>> CausalLMImpl::named_weights() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& p : named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

int64_t CausalLMImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace streamrl::model
