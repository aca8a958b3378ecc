// Mixture-of-experts MLP blocks in the Hugging Face layouts of Mixtral, Qwen2-MoE and Qwen3-MoE:
// a router, SwiGLU experts computed on their routed tokens only (tokens grouped by expert, one GEMM
// chain per expert, scattered back weighted), Qwen2-MoE's gated shared expert, and the gating
// rules: the checkpoint's top-k, top-1, and adaptive gating (Li et al., 2310.07188: a token goes to
// its top-1 expert alone when its normalised top-2 gap exceeds a threshold, else to both).
#pragma once

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "streamrl/core/config.h"
#include "streamrl/model/model_config.h"

namespace streamrl::model {

enum class Gating { kTopK, kTop1, kAdaptive };

struct GatingConfig {
  Gating kind = Gating::kTopK;  // kTopK uses the checkpoint's num_experts_per_tok
  double threshold = 0.1;       // adaptive: top-1 alone when (p1 - p2) / (p1 + p2) > threshold
};

// Parses "topk" | "top1" | "adaptive"; InputError naming the accepted spellings otherwise.
Gating parse_gating(const std::string& name);
std::string gating_name(Gating g);

// Which experts each token goes to, with what weight.
struct Routing {
  torch::Tensor expert;  // [N, K] int64 expert ids, K = the most experts any token may use
  torch::Tensor weight;  // [N, K] float combine weights; 0 where a slot is unused
  torch::Tensor used;    // [N, K] bool
};

// Routes N tokens given router probabilities [N, E] (softmax of the logits): the top-k (k from
// the config, or 1 for top-1, or 1-2 for adaptive), weights renormalised over the chosen experts
// when `normalise` (norm_topk_prob), else the raw probabilities.
Routing route(const torch::Tensor& probs, int64_t k, bool normalise, const GatingConfig& gating);

// What one MoE layer did to a batch, for auxiliary losses and statistics.
struct MoeLayerTrace {
  torch::Tensor logits;  // [N, E] router logits (differentiable)
  torch::Tensor probs;   // [N, E] their softmax
  Routing routing;       // what the layer used (the replayed routing where one was given)
  int64_t replayed = 0;  // tokens routed as `forced` said ...
  int64_t differed = 0;  // ... of which this layer's own routing chose another set of experts
};

// Experts chosen elsewhere (e.g. by the engine that generated the tokens), to route the same
// tokens the same way here: [N, K] int64 expert ids, -1 for an unused slot; a row of only -1
// (a token the other side did not route) is routed here.
torch::Tensor routing_ids(const Routing& r);  // r as such a tensor

// Expert parallelism: the ranks of an expert-parallel group each hold num_experts / size() of a
// layer's experts (rank r the r-th contiguous slice) and send each routed token to the rank that
// holds its expert (dispatch) and the result back (combine). dist::ExpertParallelGroup is the c10d
// implementation; the model sees only this interface.
class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // All-to-all with unequal splits: rows [0, send[0]) of x go to rank 0, the next send[1] to rank
  // 1, ...; returns the rows every rank sent here, in rank order (recv[j] from rank j). A
  // collective: every rank of the group calls it, in the same order. Differentiable: the
  // gradient takes the reverse exchange.
  virtual torch::Tensor all_to_all(const torch::Tensor& x, const std::vector<int64_t>& send,
                                   const std::vector<int64_t>& recv) = 0;
  // The same exchange left in flight: the returned function waits for it and returns the rows
  // (Lina's pipelining: experts compute on one token chunk while the next travels). Every rank
  // starts its exchanges in the same order and waits for each before the next forward. By
  // default it runs at once.
  using Pending = std::function<torch::Tensor()>;
  virtual Pending all_to_all_start(const torch::Tensor& x, const std::vector<int64_t>& send,
                                   const std::vector<int64_t>& recv) {
    return [out = all_to_all(x, send, recv)] { return out; };
  }
  // Token chunks each MoE layer cuts its dispatch and combine into (1: one exchange each way).
  virtual int chunks() const { return 1; }
  // The layer's combined output passes through here, so that a communication scheduler learns
  // when the combine's backward starts (an all-to-all is imminent). Identity by default.
  virtual torch::Tensor combine_output(const torch::Tensor& out) { return out; }
};

// One MoE MLP block. Submodule names follow the model type's HF layout, so named_parameters() are
// HF names: mixtral block_sparse_moe.{gate, experts.{i}.w1/w2/w3}; qwen2_moe/qwen3_moe
// mlp.{gate, experts.{i}.{gate,up,down}_proj}, plus qwen2_moe's shared_expert.{gate,up,down}_proj
// and shared_expert_gate.
class MoeBlockImpl : public torch::nn::Module {
 public:
  explicit MoeBlockImpl(const ModelConfig& config);

  // x [N, D] -> [N, D]. Records the routing in `trace` when given. With `forced` ([N, K'] ids as
  // routing_ids gives) and `apply`, tokens it routes go to its experts, weighted by this router's
  // probabilities renormalised as the checkpoint says (routing replay); without `apply` it is only
  // compared with this layer's own routing (MoeLayerTrace::differed).
  torch::Tensor forward(const torch::Tensor& x, const GatingConfig& gating,
                        MoeLayerTrace* trace = nullptr, const torch::Tensor& forced = {},
                        bool apply = true);

  // The same output by running every expert on every token and weighting by the routing: the
  // reference the grouped computation must equal (tests).
  torch::Tensor forward_dense_reference(const torch::Tensor& x, const GatingConfig& gating);

  // The name this block takes in its decoder layer: "block_sparse_moe" or "mlp".
  static std::string module_name(const ModelConfig& config);

  // Keeps only this rank's slice of the experts (the others are unregistered, so parameters()
  // and named_parameters() list only local experts, under their global names) and routes through
  // `exchange` from now on. InputError when the experts do not divide evenly over its ranks.
  void shard_experts(std::shared_ptr<ExpertExchange> exchange);

 private:
  struct Expert {
    torch::nn::Linear gate{nullptr}, up{nullptr}, down{nullptr};
    torch::Tensor forward(const torch::Tensor& x);
  };
  // The routed rows [M, D] (sorted by expert, `count` per expert over all experts) through the
  // experts, [M, D] in the same order: locally, or dispatched to and combined from their ranks.
  torch::Tensor run_experts(const torch::Tensor& rows, const torch::Tensor& counts);
  torch::Tensor run_experts_parallel(const torch::Tensor& rows, const torch::Tensor& counts);
  Routing route_tokens(const torch::Tensor& x, const GatingConfig& gating, MoeLayerTrace* trace,
                       const torch::Tensor& forced = {}, bool apply = true);
  torch::Tensor shared(const torch::Tensor& x);

  int64_t k_;
  bool normalise_;
  int64_t num_experts_;
  torch::nn::Linear router_{nullptr};
  std::shared_ptr<torch::nn::Module> expert_modules_;
  std::vector<Expert> experts_;  // the local ones: experts first_expert_, first_expert_ + 1, ...
  int64_t first_expert_ = 0;
  std::shared_ptr<ExpertExchange> exchange_;
  Expert shared_expert_;
  torch::nn::Linear shared_gate_{nullptr};
};
TORCH_MODULE(MoeBlock);

// Shards every MoE block of `model` over `exchange` (MoeBlockImpl::shard_experts); returns how
// many blocks it sharded.
int shard_experts(torch::nn::Module& model, const std::shared_ptr<ExpertExchange>& exchange);

// Whether a parameter (by its HF name) is a routed expert's weight: those are sharded by expert
// parallelism and their gradients reduced only among the ranks holding the same experts.
bool is_expert_parameter(const std::string& name);

// Auxiliary losses over the tokens of `traces` whose `valid` ([N], or [B, T] with N = B * T) is
// true, summed over layers: the Switch/Mixtral load-balancing loss E * sum_e f_e * P_e (f_e: share
// of token-expert assignments, P_e: mean router probability), the adaptive-gating paper's
// top-1-only form (f_e over top-1 choices only), and the router z-loss mean(logsumexp(logits)^2).
struct MoeAuxLosses {
  torch::Tensor load_balance;       // Switch/Mixtral form
  torch::Tensor load_balance_top1;  // the adaptive-gating paper's form
  torch::Tensor z_loss;
  std::vector<double> two_expert_share;  // per MoE layer: share of tokens that used two or more
  // Per MoE layer: the busiest expert's token assignments over the mean (1 = perfectly balanced;
  // the straggler an expert-parallel step waits for).
  std::vector<double> expert_load;
  // With a [B, T] `valid`: [B, L] float, each row's share of its valid tokens on two or more
  // experts per MoE layer (the adaptive-gating curriculum's complexity of a sequence).
  torch::Tensor two_expert_by_row;
  int64_t replayed = 0, differed = 0;  // routing replay, summed over layers (MoeLayerTrace)
  // Index among the model's MoE layers of the first one here: a pipeline stage traces its own.
  int64_t first_layer = 0;
};
MoeAuxLosses moe_aux_losses(const std::vector<MoeLayerTrace>& traces, const torch::Tensor& valid,
                            int64_t num_experts);

// Router statistics of one optimizer step over its forwards (micro-batches), each weighted by its
// tokens: what sft and train log as `moe` in metrics.jsonl.
class MoeStats {
 public:
  // The losses stay tensors until to_json(), so a device step does not wait on each micro-batch.
  // Each layer is weighted by the tokens that passed it, so the traces of a pipeline's stages
  // (aux.first_layer onwards) add up to those of the whole model.
  void add(const MoeAuxLosses& aux, bool aux_top1_only, int64_t tokens);
  // Adds another step's statistics (several optimizer steps in one iteration), or another
  // stage's layers.
  void merge(const MoeStats& other);
  bool empty() const;  // no token traced
  // two_expert_share and expert_load per layer, aux_loss, z_loss; routing_mismatch (differed over
  // replayed token-layer pairs, null when nothing was compared) when `routing` is set.
  nlohmann::json to_json(bool routing) const;

  // As numbers for `layers` MoE layers, whose element-wise sum over processes (an all-reduce) is
  // the merge of their statistics; from_values reads such a sum back.
  std::vector<double> to_values(size_t layers) const;
  static MoeStats from_values(const std::vector<double>& values);

 private:
  // Per MoE layer: sums weighted by the tokens that passed the layer, and those tokens.
  std::vector<double> two_expert_share_, expert_load_, layer_tokens_;
  torch::Tensor aux_loss_, z_loss_;  // summed over layers, weighted by tokens
  int64_t replayed_ = 0, differed_ = 0;
};

// The `model.moe` config section of sft and train: how MoE layers route (both in training and in
// generation) and which router losses training adds. Ignored for dense models.
struct MoeOptions {
  GatingConfig gating;
  bool aux_top1_only = false;  // aux_loss: "switch" (all assignments) or "top1" (the paper's)
  double aux_loss_coef = 0;    // load-balancing coefficient (Mixtral trains with 0.02)
  double z_loss_coef = 0;      // router z-loss coefficient (ST-MoE uses 0.001)
  // RL: route each generated token in training to the experts the engine chose (algo.
  // moe_routing_replay), instead of only measuring how often they differ.
  bool routing_replay = false;

  // Reads gating, threshold, aux_loss, aux_loss_coef and z_loss_coef; InputError naming the key.
  void read(const core::Config& section);
  // The coefficient-weighted router loss of one forward: a 0-dim tensor, 0 when dense or off.
  torch::Tensor loss(const std::optional<MoeAuxLosses>& aux) const;
};

}  // namespace streamrl::model
