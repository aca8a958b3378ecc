// Decoder-only transformer of the Llama / Qwen2 / Qwen3 family (RMSNorm, RoPE, SwiGLU,
// grouped-query attention, optional QKV bias and q/k norm, optional tied embeddings) and its
// mixture-of-experts members (Mixtral, Qwen2-MoE, Qwen3-MoE; model/moe.h), with two execution paths
// that must agree: `score` (training: padded batch -> per-token log-probs, differentiable) and
// `forward_cached` (inference: prefill or decode through a KV cache). Knows nothing about RL.
#pragma once

#include <torch/torch.h>

#include <optional>

#include "streamrl/model/decode_attention.h"
#include "streamrl/model/model_config.h"
#include "streamrl/model/moe.h"
#include "streamrl/model/precision.h"
#include "streamrl/sparse/key_blocks.h"
#include "streamrl/sparse/lowrank_predictor.h"

namespace streamrl::model {

class KVCache;
struct AttentionCapture;

// What `score` computes besides log-probs; each extra costs memory.
struct ScoreOptions {
  bool return_logits = false;   // keep [B, T, V] logits
  bool return_entropy = false;  // per-token entropy of the predictive distribution
  // Log-probs (and entropy) of softmax(logits / temperature): the distribution a sampler with
  // this temperature drew from, so RL ratios compare like with like. Logits stay unscaled.
  double temperature = 1.0;
  // MoE routing replay: per MoE layer, [B, T, K] expert ids the tokens were routed to when they
  // were generated (-1: not routed there, e.g. padding); with replay_apply those tokens are
  // routed the same way, else only compared (ScoreOutput::moe counts the tokens that differ).
  const std::vector<torch::Tensor>* replay_routing = nullptr;
  bool replay_apply = true;
  // Appends every layer's attention inputs (detached), for the sparse-attention predictors to
  // learn from beside training (model/sparse_training.h).
  std::vector<AttentionCapture>* capture = nullptr;
};

struct ScoreOutput {
  torch::Tensor logprobs;  // [B, T] float: log p(tokens[b,t] | tokens[b,<t]); 0 at the first
                           // valid token of a row and at padding
  torch::Tensor entropy;   // [B, T] entropy of p(. | tokens[b,<t]) at the same places, if asked
  torch::Tensor logits;    // [B, T, V] logits predicting position t+1 from position t, if asked
  std::optional<MoeAuxLosses> moe;  // MoE models: router losses over the valid tokens
};

// One pipeline stage's share of the training path (CausalLMImpl::score_layers).
struct StageOutput {
  torch::Tensor hidden;  // [B, T, D] after the stage's last layer (the last stage: normed)
  ScoreOutput score;     // set when the stage ends with the model's last layer
  // A stage before the last: the router losses of its MoE layers (the last stage's are
  // score.moe). Summed over the stages they are the whole model's.
  std::optional<MoeAuxLosses> moe;
};

// DSV sparse attention (off by default): per layer a low-rank predictor scores keys cheaply. On the
// training path each sparse head's query blocks attend to their top-scored key blocks; decoding
// attends each row to its top-scored blocks (the KV cache holds the predictors' keys) plus a
// recent window.
struct SparseAttentionConfig {
  int64_t rank = 16;  // low-rank dimensions per head (DSV: 16)
  SparseDecodeOptions decode;
  sparse::KeyBlockConfig train;  // the training path's query/key blocks
  // Training-path rows shorter than this stay dense: below it gathering the kept blocks costs
  // more than it saves (bench sparse_attention).
  int64_t min_tokens = 1024;
};

// One layer's attention inputs on the training path: x the normed layer input [B, T, D], q
// [B, T, H, hd] and k [B, T, Hkv, hd] after RoPE (what the predictor learns to score like).
struct AttentionCapture {
  torch::Tensor x, q, k;
};

// Layers [first, end) on `input` (undefined: the tokens' embeddings); end == -1: to the last.
struct LayerSpan {
  int first = 0, end = -1;
  torch::Tensor input;
};

// HF parameter names come from the module tree: model.embed_tokens.weight,
// model.layers.{i}.self_attn.{q,k,v,o}_proj.{weight,bias}, model.layers.{i}.self_attn.{q,k}_norm
// .weight (Qwen3), model.layers.{i}.mlp.{gate,up,down}_proj.weight (dense layers; MoE layers as in
// model/moe.h), model.layers.{i}.{input,post_attention}_layernorm.weight, model.norm.weight,
// lm_head.weight (absent when embeddings are tied).
class CausalLMImpl : public torch::nn::Module {
 public:
  // Random initialisation: N(0, initializer_range) for matrices, ones for norms, zero biases,
  // drawn from a generator seeded with `seed` (independent of torch's global RNG).
  CausalLMImpl(const ModelConfig& config, uint64_t seed = 0);

  const ModelConfig& config() const { return config_; }

  // Where the weights live and their dtype (the embedding's; all weights share them).
  torch::Device device() const;
  torch::ScalarType dtype() const;
  // The dtype activations (and a KV cache) have: the autocast dtype on CUDA, else the weights'.
  torch::ScalarType compute_dtype() const;
  torch::TensorOptions options() const {
    return torch::TensorOptions(device()).dtype(compute_dtype());
  }
  // Moves the weights to `device` in `dtype` (RoPE tables stay fp32). Generation on CUDA keeps
  // bf16 weights; a trainer keeps fp32 master weights and sets an autocast dtype instead.
  void place(const torch::Device& device, torch::ScalarType dtype = torch::kFloat32);
  // `score` and `forward_cached` on CUDA run under autocast to this dtype (fp32: off), so a
  // colocated engine shares the trainer's fp32 weights and computes in bf16. Log-probs stay fp32.
  void set_autocast(torch::ScalarType dtype) { autocast_dtype_ = dtype; }
  torch::ScalarType autocast() const { return autocast_dtype_; }

  // How MoE layers route tokens in both paths (default: the checkpoint's top-k). No-op when dense.
  void set_gating(const GatingConfig& gating) { gating_ = gating; }
  const GatingConfig& gating() const { return gating_; }

  // Training path. tokens [B, T] int64, valid [B, T] bool (any device; outputs on the model's) (any
  // padding pattern: left, right or both; valid tokens of a row are one contiguous causal
  // sequence). Differentiable.
  ScoreOutput score(const torch::Tensor& tokens, const torch::Tensor& valid,
                    const ScoreOptions& options = {});

  // Pipeline parallelism: the training path of layers [first, end) only. `input` is the hidden
  // states [B, T, D] the previous stage produced (undefined when first == 0: the tokens are
  // embedded). When end is the layer count the final norm and LM head follow and `score` holds
  // what `score` returns. Chaining the stages over 0 .. L gives `score`; an MoE model's router
  // losses come per stage (each over its own layers).
  StageOutput score_layers(const torch::Tensor& tokens, const torch::Tensor& valid,
                           const torch::Tensor& input, int first, int end,
                           const ScoreOptions& options = {});

  // Inference path: runs new tokens through the model, appending their keys/values to `cache`.
  // tokens [B, T] int64 new tokens, positions [B, T] int64 absolute positions (the token count
  // already cached for that slot, +0, +1, ...), valid [B, T] bool (padding is never cached),
  // slots [B] int64 cache slot of each row; inputs best on the host (checked there without a
  // device sync), the cache on the model's device. Returns [B, V] logits (weights' dtype and
  // device) of each row's last valid token. With `routing`, MoE models also return per MoE layer
  // the [B*T, K] expert ids (routing_ids) each token was routed to.
  torch::Tensor forward_cached(const torch::Tensor& tokens, const torch::Tensor& positions,
                               const torch::Tensor& valid, const torch::Tensor& slots,
                               KVCache& cache, std::vector<torch::Tensor>* routing = nullptr);

  // Sparse attention with fresh predictors (train them with fit_sparse_predictors or
  // SparseAttentionTrainer), every head sparse unless `all_heads` is false. The predictors are not
  // the model's parameters: not in named_weights or the policy's optimiser; checkpoints keep them
  // in files of their own (model/checkpoint.h).
  void enable_sparse_attention(const SparseAttentionConfig& config, uint64_t seed = 0,
                               bool all_heads = true);
  void disable_sparse_attention() { sparse_.reset(); }
  const std::optional<SparseAttentionConfig>& sparse_attention() const { return sparse_; }
  std::vector<sparse::LowRankPredictor>& sparse_predictors() { return predictors_; }
  // Which query heads of `layer` attend sparsely: [H] bool on the CPU. The training path runs those
  // heads sparse; decoding runs a layer sparse once all its heads are.
  const torch::Tensor& sparse_heads(size_t layer) const { return sparse_heads_.at(layer); }
  void set_sparse_heads(size_t layer, const torch::Tensor& heads);

  // Every layer's attention inputs for tokens [B, T] (all valid, causal), without gradients.
  std::vector<AttentionCapture> capture_attention(const torch::Tensor& tokens);

  // The weights as HF-named tensors (lm_head.weight omitted when tied).
  std::vector<std::pair<std::string, torch::Tensor>> named_weights() const;

  // Number of parameters (tied embeddings counted once).
  int64_t num_parameters() const;

 private:
  struct Layer;
  struct KvWrite;
  // Returns the hidden states after the span, through the final norm when it reaches the end.
  torch::Tensor run(const torch::Tensor& tokens, const torch::Tensor& positions,
                    const torch::Tensor& mask, KVCache* cache, const KvWrite* write,
                    std::vector<MoeLayerTrace>* moe_traces = nullptr,
                    const std::vector<torch::Tensor>* forced = nullptr, bool apply_forced = true,
                    std::vector<AttentionCapture>* capture = nullptr, const LayerSpan& span = {},
                    const std::vector<std::pair<int64_t, int64_t>>* rows = nullptr);
  // The training path's attention one row at a time: rows (start, length) of the batch's valid
  // tokens. Sparse heads of rows from min_tokens attend to their predicted key blocks, other rows
  // from 2048 tokens on the CPU to all causal keys in tiles; the remaining rows go through the
  // batched form with `mask`.
  torch::Tensor row_attention(size_t layer, const torch::Tensor& x, const torch::Tensor& q,
                              const torch::Tensor& k, const torch::Tensor& v,
                              const std::vector<std::pair<int64_t, int64_t>>& rows,
                              const torch::Tensor& mask, double scale);
  torch::Tensor output_logits(const torch::Tensor& hidden);

  ModelConfig config_;
  GatingConfig gating_;
  torch::nn::Embedding embed_tokens_{nullptr};
  std::vector<std::shared_ptr<Layer>> layers_;
  torch::Tensor final_norm_;
  torch::Tensor lm_head_;              // [V, D]; undefined when tied
  torch::Tensor rope_cos_, rope_sin_;  // [max_positions, head_dim] fp32, on the weights' device
  torch::ScalarType autocast_dtype_ = torch::kFloat32;
  bool fuse_inference_ = false;  // the CPU inference path runs fused q/k/v and gate/up GEMMs
  std::optional<SparseAttentionConfig> sparse_;
  std::vector<sparse::LowRankPredictor> predictors_;  // per layer, with sparse_
  std::vector<torch::Tensor> sparse_heads_;           // per layer [H] bool, with sparse_
};
TORCH_MODULE(CausalLM);

// Puts a model that only generates or scores on `device` (cpu, cuda, cuda:N) with its weights in
// the dtype `dtype` (model.dtype: auto, float32, bfloat16) resolves to there. InputError naming
// `what` for a bad device or dtype.
void place_for_inference(CausalLM& model, const std::string& device, const std::string& dtype,
                         const std::string& what = "--device");

}  // namespace streamrl::model
