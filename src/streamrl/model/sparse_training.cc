#include "streamrl/model/sparse_training.h"

#include <algorithm>
#include <cmath>

#include "streamrl/core/errors.h"
#include "streamrl/core/log.h"
#include "streamrl/sparse/key_blocks.h"
#include "streamrl/sparse/lowrank_predictor.h"
#include "streamrl/sparse/speedup_table.h"

namespace streamrl::model {

namespace {

// "config key 'model.sparse_attention.rank' must be > 0" when `ok` is false.
void need(const core::Config& section, bool ok, const char* key, const char* what) {
  if (ok) return;
  const std::string prefix = section.prefix().empty() ? "" : section.prefix() + ".";
  throw InputError("config key '" + prefix + key + "' " + what);
}

}  // namespace

SparseAttentionConfig read_sparse_attention_config(const core::Config& section, bool required) {
  SparseAttentionConfig a;
  auto get = [required](const core::Config& c, const char* key, int64_t& value) {
    value = required ? c.require<int64_t>(key) : (c.get(key, value), value);
  };
  get(section, "rank", a.rank);
  get(section, "block", a.train.block);
  get(section, "keep", a.train.keep);
  get(section, "recent", a.train.recent);
  get(section, "min_tokens", a.min_tokens);
  if (required && !section.has("decode")) {
    throw InputError("config key '" + section.prefix() + (section.prefix().empty() ? "" : ".") +
                     "decode' is required");
  }
  const core::Config decode = section.section("decode");
  get(decode, "block", a.decode.block);
  get(decode, "keep", a.decode.keep);
  get(decode, "recent", a.decode.recent);
  need(section, a.rank > 0, "rank", "must be > 0");
  need(section, a.train.block > 0, "block", "must be > 0");
  need(section, a.train.recent >= 0, "recent", "must be >= 0");
  need(section, a.train.keep > a.train.recent, "keep",
       "must be > recent (the diagonal block is kept too)");
  need(section, a.min_tokens >= 0, "min_tokens", "must be >= 0");
  need(section, a.decode.block > 0 && a.decode.keep >= 0 && a.decode.recent >= 0, "decode",
       "needs block > 0, keep >= 0 and recent >= 0");
  return a;
}

void SparseTrainingOptions::read(const core::Config& section) {
  section.get("enabled", enabled);
  attention = read_sparse_attention_config(section, /*required=*/false);
  section.get("lr", lr);
  section.get("stride", stride);
  section.get("theta", theta);
  section.get("momentum", momentum);
  section.get("loss_threshold", loss_threshold);
  section.get("sparsity_threshold", sparsity_threshold);
  section.get("min_coverage", min_coverage);
  section.get("warmup_steps", warmup_steps);
  section.get("recall_every", recall_every);
  section.get("seed", seed);
  section.get("dispatch", dispatch);
  need(section, dispatch == "fixed" || dispatch == "measured", "dispatch",
       "must be fixed or measured");
  need(section, lr > 0 && std::isfinite(lr), "lr", "must be > 0");
  need(section, stride > 0, "stride", "must be > 0");
  need(section, theta > 0 && theta <= 1, "theta", "must be in (0, 1]");
  need(section, momentum >= 0 && momentum < 1, "momentum", "must be in [0, 1)");
  need(section, loss_threshold >= 0, "loss_threshold", "must be >= 0");
  need(section, sparsity_threshold >= 0 && sparsity_threshold <= 1, "sparsity_threshold",
       "must be in [0, 1]");
  need(section, min_coverage >= 0 && min_coverage <= 1, "min_coverage", "must be in [0, 1]");
  need(section, warmup_steps >= 0, "warmup_steps", "must be >= 0");
  need(section, recall_every > 0, "recall_every", "must be > 0");
}

SparseAttentionTrainer::SparseAttentionTrainer(CausalLM& lm, const SparseTrainingOptions& options)
    : lm_(lm), options_(options) {
  if (lm_->sparse_attention() && lm_->sparse_attention()->rank != options.attention.rank) {
    throw InputError("model.sparse_attention.rank is " + std::to_string(options.attention.rank) +
                     " but the checkpoint's predictors have rank " +
                     std::to_string(lm_->sparse_attention()->rank));
  }
  if (!lm_->sparse_attention()) {
    lm_->enable_sparse_attention(options.attention, options.seed, /*all_heads=*/false);
  }
  std::vector<torch::Tensor> params;
  for (auto& p : lm_->sparse_predictors()) {
    for (const auto& t : p->parameters()) params.push_back(t);
  }
  optimizer_.emplace(params, torch::optim::AdamOptions(options.lr));
  loss_.assign(lm_->sparse_predictors().size(), NAN);
  sparsity_.resize(loss_.size());
  coverage_.resize(loss_.size());
  recall_.resize(loss_.size());
}

bool SparseAttentionTrainer::capture(ScoreOptions& options) {
  if (fed_this_step_) return false;
  captured_.clear();
  options.capture = &captured_;
  return true;
}

void SparseAttentionTrainer::observe_captured(const torch::Tensor& valid) {
  fed_this_step_ = true;
  std::vector<AttentionCapture> captures = std::move(captured_);
  captured_.clear();
  observe(captures, valid);
}

void SparseAttentionTrainer::observe(const std::vector<AttentionCapture>& captures,
                                     const torch::Tensor& valid) {
  auto& predictors = lm_->sparse_predictors();
  if (captures.size() != predictors.size()) {
    throw InputError("sparse attention: " + std::to_string(captures.size()) +
                     " captured layers for " + std::to_string(predictors.size()) + " predictors");
  }
  const torch::Tensor v = valid.to(torch::kCPU, torch::kBool);
  const torch::Tensor counts = v.sum(1);
  const int64_t b = counts.argmax().item<int64_t>();
  const int64_t S = counts[b].item<int64_t>();
  const int64_t s = v[b].to(torch::kLong).argmax().item<int64_t>();
  if (S < options_.stride + 1) return;  // no query to score
  const SparseAttentionConfig& cfg = *lm_->sparse_attention();
  const int64_t hd = lm_->config().head_dim;
  const int64_t G = lm_->config().num_attention_heads / lm_->config().num_key_value_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const double m = observed_ == 0 ? 0.0 : options_.momentum;
  auto ema = [m](const torch::Tensor& old, const torch::Tensor& now) {
    return old.defined() ? old * m + now * (1 - m) : now;
  };

  optimizer_->zero_grad();
  std::vector<torch::Tensor> losses;
  for (size_t l = 0; l < predictors.size(); ++l) {
    const AttentionCapture& c = captures[l];
    auto row = [&](const torch::Tensor& t) {  // [T, h, hd] -> [h, S, hd] fp32 on the row's span
      return t[b].narrow(0, s, S).transpose(0, 1).to(torch::kFloat32);
    };
    const torch::Tensor q = row(c.q), k = row(c.k).repeat_interleave(G, 0);
    const auto [q_lr, k_lr] = predictors[l]->forward(c.x[b].narrow(0, s, S).to(torch::kFloat32));
    losses.push_back(sparse::predictor_loss(q_lr, k_lr, q, k, options_.stride));
    torch::NoGradGuard no_grad;
    const torch::Tensor blocks = sparse::select_key_blocks(q_lr, k_lr, cfg.train);
    const torch::Tensor sparsity =
        sparse::head_sparsity(q, k, scale, options_.theta, options_.stride).cpu();
    const torch::Tensor coverage =
        sparse::block_coverage(q, k, blocks, cfg.train.block, scale, options_.stride).cpu();
    sparsity_[l] = ema(sparsity_[l], sparsity);
    coverage_[l] = ema(coverage_[l], coverage);
    if (observed_ % options_.recall_every == 0) {
      // Against the blocks that hold the most real mass of the same rows at this budget: what
      // the predictor loses, apart from what the block budget does. Metrics only, so sampled.
      const torch::Tensor best = sparse::block_coverage(
          q, k, sparse::best_key_blocks(q, k, cfg.train, scale, options_.stride), cfg.train.block,
          scale, options_.stride);
      recall_[l] = ema(recall_[l], coverage / best.cpu().clamp_min(1e-12));
    }
  }
  torch::stack(losses).sum().backward();
  optimizer_->step();
  for (size_t l = 0; l < predictors.size(); ++l) {
    const double now = losses[l].item<double>();
    loss_[l] = std::isnan(loss_[l]) ? now : loss_[l] * m + now * (1 - m);
  }
  ++observed_;
  if (observed_ < options_.warmup_steps) return;
  for (size_t l = 0; l < predictors.size(); ++l) {
    if (!(loss_[l] <= options_.loss_threshold)) continue;
    const torch::Tensor ready =
        (sparsity_[l] >= options_.sparsity_threshold) & (coverage_[l] >= options_.min_coverage);
    const torch::Tensor heads = lm_->sparse_heads(l) | ready;  // a sparse head stays sparse
    if (!heads.equal(lm_->sparse_heads(l))) lm_->set_sparse_heads(l, heads);
  }
}

nlohmann::json SparseAttentionTrainer::metrics() const {
  nlohmann::json layers = nlohmann::json::array();
  int64_t sparse_heads = 0, heads = 0;
  for (size_t l = 0; l < loss_.size(); ++l) {
    const torch::Tensor mask = lm_->sparse_heads(l);
    std::vector<int64_t> which;
    for (int64_t h = 0; h < mask.size(0); ++h) {
      if (mask[h].item<bool>()) which.push_back(h);
    }
    sparse_heads += static_cast<int64_t>(which.size());
    heads += mask.size(0);
    nlohmann::json rec = {{"layer", l}, {"sparse_heads", which}};
    if (!std::isnan(loss_[l])) rec["predictor_loss"] = loss_[l];
    if (sparsity_[l].defined()) rec["sparsity"] = sparsity_[l].mean().item<double>();
    if (coverage_[l].defined()) rec["coverage"] = coverage_[l].mean().item<double>();
    if (recall_[l].defined()) rec["recall"] = recall_[l].mean().item<double>();
    layers.push_back(std::move(rec));
  }
  nlohmann::json out = {{"observed", observed_},
                        {"sparse_heads", sparse_heads},
                        {"heads", heads},
                        {"min_tokens", lm_->sparse_attention()->min_tokens},
                        {"layers", std::move(layers)}};
  if (!dispatch_.is_null()) out["dispatch"] = dispatch_;
  return out;
}

nlohmann::json SparseAttentionTrainer::state() const {
  auto values = [](const torch::Tensor& t) -> nlohmann::json {
    if (!t.defined()) return nullptr;
    const torch::Tensor c = t.to(torch::kFloat64).contiguous();
    return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  };
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < loss_.size(); ++l) {
    nlohmann::json loss = nullptr;
    if (!std::isnan(loss_[l])) loss = loss_[l];
    layers.push_back({{"loss", loss},
                      {"sparsity", values(sparsity_[l])},
                      {"coverage", values(coverage_[l])},
                      {"recall", values(recall_[l])}});
  }
  return {{"observed", observed_}, {"layers", std::move(layers)}};
}

void SparseAttentionTrainer::restore(const nlohmann::json& state) {
  if (state.is_null()) return;
  const nlohmann::json& layers = state.at("layers");
  if (layers.size() != loss_.size()) {
    throw InputError("checkpoint's sparse-attention profile has " + std::to_string(layers.size()) +
                     " layers, the model " + std::to_string(loss_.size()));
  }
  observed_ = state.at("observed").get<int64_t>();
  auto tensor = [](const nlohmann::json& j) {
    return j.is_null() ? torch::Tensor()
                       : torch::tensor(j.get<std::vector<double>>(), torch::kFloat32);
  };
  for (size_t l = 0; l < loss_.size(); ++l) {
    const nlohmann::json& rec = layers[l];
    loss_[l] = rec.at("loss").is_null() ? NAN : rec.at("loss").get<double>();
    sparsity_[l] = tensor(rec.at("sparsity"));
    coverage_[l] = tensor(rec.at("coverage"));
    recall_[l] = tensor(rec.value("recall", nlohmann::json()));  // absent before it was kept
  }
}

std::unique_ptr<SparseAttentionTrainer> start_sparse_attention(CausalLM& lm,
                                                               const SparseTrainingOptions& options,
                                                               const nlohmann::json& resumed_state,
                                                               int processes) {
  if (!options.enabled) {
    lm->disable_sparse_attention();
    return nullptr;
  }
  if (processes > 1) {
    throw InputError("model.sparse_attention trains in one process; run it without launch");
  }
  SparseTrainingOptions chosen = options;
  nlohmann::json dispatch = {{"mode", options.dispatch}};
  if (options.dispatch == "measured" && lm->sparse_attention()) {
    dispatch["from"] = "checkpoint";  // a resumed run keeps the length its table chose
  } else if (options.dispatch == "measured") {
    const ModelConfig& mc = lm->config();
    const sparse::SpeedupTable table = sparse::measure_speedup_table(
        mc.num_attention_heads, mc.num_key_value_heads,
        mc.head_dim > 0 ? mc.head_dim : mc.hidden_size / mc.num_attention_heads,
        options.attention.rank, options.attention.train,
        std::min(mc.max_position_embeddings, SparseTrainingOptions::kMaxMeasuredTokens),
        lm->device());
    chosen.attention.min_tokens = table.min_tokens;
    dispatch.update(table.to_json());
    SLOG(kInfo) << "sparse attention: measured dispatch sends rows of " << table.min_tokens
                << "+ tokens to the sparse kernel";
  }
  auto trainer = std::make_unique<SparseAttentionTrainer>(lm, chosen);
  trainer->set_dispatch(std::move(dispatch));
  trainer->restore(resumed_state);
  return trainer;
}

}  // namespace streamrl::model
