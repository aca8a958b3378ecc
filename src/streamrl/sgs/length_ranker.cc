#include "streamrl/sgs/length_ranker.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/model_config.h"
#include "streamrl/model/safetensors.h"
#include "streamrl/tasks/length_stats.h"

namespace streamrl::sgs {
namespace {

constexpr const char* kHeadWeight = "ranker_head.weight";
constexpr const char* kHeadBias = "ranker_head.bias";

model::ModelConfig encoder_config(const RankerConfig& c) {
  model::ModelConfig m;
  m.vocab_size = c.vocab_size;
  m.hidden_size = c.hidden_size;
  m.intermediate_size = 3 * c.hidden_size;
  m.num_hidden_layers = c.layers;
  m.num_attention_heads = c.heads;
  m.num_key_value_heads = c.heads;
  m.head_dim = c.heads > 0 ? c.hidden_size / c.heads : 0;
  m.max_position_embeddings = c.max_prompt_tokens;
  m.tie_word_embeddings = true;
  return m;
}

double target_of(double length) { return std::log1p(std::max(0.0, length)); }

}  // namespace

nlohmann::json RankerConfig::to_json() const {
  return {{"vocab_size", vocab_size},
          {"hidden_size", hidden_size},
          {"layers", layers},
          {"heads", heads},
          {"max_prompt_tokens", max_prompt_tokens},
          {"steps", steps},
          {"batch_size", batch_size},
          {"lr", lr},
          {"seed", seed}};
}

RankerConfig RankerConfig::from_json(const nlohmann::json& j) {
  RankerConfig c;
  try {
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.hidden_size = j.at("hidden_size").get<int>();
    c.layers = j.at("layers").get<int>();
    c.heads = j.at("heads").get<int>();
    c.max_prompt_tokens = j.at("max_prompt_tokens").get<int>();
    c.steps = j.at("steps").get<int>();
    c.batch_size = j.at("batch_size").get<int>();
    c.lr = j.at("lr").get<double>();
    c.seed = j.at("seed").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("malformed ranker config: ") + e.what());
  }
  return c;
}

nlohmann::json RankerMetrics::to_json() const {
  return {{"train_examples", train_examples}, {"eval_examples", eval_examples},
          {"recall_top20", recall_top20},     {"recall_top10", recall_top10},
          {"recall_top5", recall_top5},       {"spearman", spearman},
          {"train_loss", train_loss},         {"fit_seconds", fit_seconds}};
}

RankerMetrics ranking_metrics(std::span<const double> predicted, std::span<const double> actual) {
  if (predicted.size() != actual.size()) {
    throw std::invalid_argument("ranking_metrics: sizes differ");
  }
  RankerMetrics m;
  m.eval_examples = actual.size();
  if (actual.empty()) return m;
  m.recall_top20 = tasks::top_fraction_recall(predicted, actual, 0.20);
  m.recall_top10 = tasks::top_fraction_recall(predicted, actual, 0.10);
  m.recall_top5 = tasks::top_fraction_recall(predicted, actual, 0.05);
  m.spearman = tasks::spearman(predicted, actual);
  return m;
}

LengthRanker::LengthRanker(const RankerConfig& config) : config_(config) {
  if (config_.vocab_size < 1 || config_.max_prompt_tokens < 2 || config_.steps < 0 ||
      config_.batch_size < 1 || !(config_.lr > 0)) {
    throw InputError(
        "ranker: need vocab_size >= 1, max_prompt_tokens >= 2, steps >= 0, "
        "batch_size >= 1 and lr > 0");
  }
  encoder_ = model::CausalLM(encoder_config(config_), config_.seed);
  // Features: last-token logits, mean-pooled logits, log prompt length.
  head_ = torch::nn::Linear(2 * config_.vocab_size + 1, 1);
  torch::NoGradGuard no_grad;
  head_->weight.zero_();
  head_->bias.zero_();
}

torch::Tensor LengthRanker::forward(const std::vector<const std::vector<int32_t>*>& prompts) {
  const int64_t B = static_cast<int64_t>(prompts.size());
  int64_t T = 1;
  for (const auto* p : prompts) {
    T = std::max<int64_t>(T, std::min<int64_t>(p->size(), config_.max_prompt_tokens));
  }
  std::vector<int64_t> tokens(B * T, 0), lens(B);
  std::vector<float> log_full_len(B);
  std::vector<uint8_t> valid(B * T, 0);
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = *prompts[b];
    if (p.empty()) throw InputError("ranker: empty prompt");
    const int64_t n = std::min<int64_t>(p.size(), T);
    const size_t start = p.size() - n;  // keep the last tokens
    for (int64_t t = 0; t < n; ++t) {
      const int32_t id = p[start + t];
      if (id < 0 || id >= config_.vocab_size) {
        throw InputError("ranker: token id " + std::to_string(id) + " outside the vocabulary");
      }
      tokens[b * T + t] = id;
      valid[b * T + t] = 1;
    }
    lens[b] = n;
    log_full_len[b] = static_cast<float>(std::log(static_cast<double>(p.size())));
  }
  auto tok = torch::tensor(tokens, torch::kLong).view({B, T});
  auto val = torch::tensor(valid, torch::kUInt8).view({B, T}).to(torch::kBool);
  model::ScoreOptions so;
  so.return_logits = true;
  torch::Tensor logits = encoder_->score(tok, val, so).logits;  // [B, T, V]
  auto len_t = torch::tensor(lens, torch::kLong);
  torch::Tensor last = logits.index({torch::arange(B), len_t - 1});  // [B, V]
  torch::Tensor mean = (logits * val.unsqueeze(-1)).sum(1) / len_t.unsqueeze(1).to(torch::kFloat);
  torch::Tensor feats =
      torch::cat({last, mean, torch::tensor(log_full_len).view({B, 1})}, 1);  // [B, 2V + 1]
  return head_->forward(feats).view({B});
}

RankerMetrics LengthRanker::fit(const std::vector<LengthExample>& train,
                                const std::vector<LengthExample>& eval) {
  if (train.empty()) throw InputError("ranker: no training examples");
  const auto t0 = std::chrono::steady_clock::now();
  double mean = 0, sq = 0;
  for (const auto& e : train) mean += target_of(e.length);
  mean /= static_cast<double>(train.size());
  for (const auto& e : train) sq += std::pow(target_of(e.length) - mean, 2);
  target_mean_ = mean;
  target_std_ = std::max(1e-3, std::sqrt(sq / static_cast<double>(train.size())));

  std::vector<torch::Tensor> params = encoder_->parameters();
  for (auto& p : head_->parameters()) params.push_back(p);
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(config_.lr).weight_decay(0.0));
  encoder_->train();
  std::mt19937_64 rng(config_.seed * 7919 + fits_++);
  std::vector<size_t> perm(train.size());
  std::iota(perm.begin(), perm.end(), 0);
  size_t cursor = perm.size();
  double loss_sum = 0;
  int loss_n = 0;
  const int tail_from = config_.steps - std::max(1, config_.steps / 10);
  for (int step = 0; step < config_.steps; ++step) {
    std::vector<const std::vector<int32_t>*> batch;
    std::vector<float> target;
    while (static_cast<int>(batch.size()) < std::min<int>(config_.batch_size, train.size())) {
      if (cursor == perm.size()) {
        std::shuffle(perm.begin(), perm.end(), rng);
        cursor = 0;
      }
      const LengthExample& e = train[perm[cursor++]];
      batch.push_back(&e.prompt_ids);
      target.push_back(static_cast<float>((target_of(e.length) - target_mean_) / target_std_));
    }
    const double frac = config_.steps > 1 ? static_cast<double>(step) / (config_.steps - 1) : 0;
    for (auto& g : opt.param_groups()) g.options().set_lr(config_.lr * (1.0 - 0.9 * frac));
    torch::Tensor loss = torch::mse_loss(forward(batch), torch::tensor(target));
    opt.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(params, 1.0);
    opt.step();
    if (step >= tail_from) {
      loss_sum += loss.item<double>();
      ++loss_n;
    }
  }
  encoder_->eval();
  RankerMetrics m = evaluate(eval);
  m.train_examples = train.size();
  m.train_loss = loss_n > 0 ? loss_sum / loss_n : 0;
  m.fit_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

std::vector<double> LengthRanker::predict(const std::vector<std::vector<int32_t>>& prompts) {
  torch::NoGradGuard no_grad;
  std::vector<double> out;
  out.reserve(prompts.size());
  for (size_t s = 0; s < prompts.size(); s += 128) {
    std::vector<const std::vector<int32_t>*> batch;
    for (size_t i = s; i < std::min(prompts.size(), s + 128); ++i) batch.push_back(&prompts[i]);
    torch::Tensor z = forward(batch).to(torch::kDouble);
    auto acc = z.accessor<double, 1>();
    for (int64_t i = 0; i < z.size(0); ++i) {
      out.push_back(std::expm1(target_mean_ + target_std_ * acc[i]));
    }
  }
  return out;
}

RankerMetrics LengthRanker::evaluate(const std::vector<LengthExample>& examples) {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<double> actual;
  for (const auto& e : examples) {
    prompts.push_back(e.prompt_ids);
    actual.push_back(e.length);
  }
  std::vector<double> pred = predict(prompts);
  return ranking_metrics(pred, actual);
}

void LengthRanker::save(const std::filesystem::path& dir) {
  std::filesystem::path tmp = dir;
  tmp += ".tmp";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  model::TensorMap tensors;
  for (auto& [name, t] : encoder_->named_weights()) tensors[name] = t.detach();
  tensors[kHeadWeight] = head_->weight.detach();
  tensors[kHeadBias] = head_->bias.detach();
  model::write_safetensors(tmp / model::kSafetensorsFileName, tensors);
  nlohmann::json j = {{"ranker", config_.to_json()},
                      {"target_mean", target_mean_},
                      {"target_std", target_std_},
                      {"fits", fits_}};
  core::write_file_atomic(tmp / "ranker.json", j.dump(2) + "\n");
  core::replace_directory(tmp, dir);
}

LengthRanker LengthRanker::load(const std::filesystem::path& dir) {
  const auto json_path = dir / "ranker.json";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(core::read_file(json_path));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(json_path.string() + ": " + e.what());
  }
  if (!j.contains("ranker")) throw InputError(json_path.string() + ": no \"ranker\" section");
  LengthRanker r(RankerConfig::from_json(j["ranker"]));
  r.target_mean_ = j.value("target_mean", 0.0);
  r.target_std_ = j.value("target_std", 1.0);
  r.fits_ = j.value("fits", uint64_t{0});
  model::TensorMap tensors = model::read_safetensors(dir / model::kSafetensorsFileName);
  const std::string source = (dir / model::kSafetensorsFileName).string();
  for (const char* name : {kHeadWeight, kHeadBias}) {
    auto it = tensors.find(name);
    torch::Tensor& dst = std::string(name) == kHeadWeight ? r.head_->weight : r.head_->bias;
    if (it == tensors.end() || it->second.sizes() != dst.sizes()) {
      throw InputError(source + ": tensor '" + name + "' is missing or mis-shaped");
    }
    torch::NoGradGuard no_grad;
    dst.copy_(it->second.to(torch::kFloat32));
    tensors.erase(it);
  }
  model::load_weights(r.encoder_, tensors, source);
  r.encoder_->eval();
  return r;
}

bool held_out_prompt(const std::vector<int32_t>& prompt_ids) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t id : prompt_ids) {
    h ^= static_cast<uint32_t>(id);
    h *= 1099511628211ull;
  }
  return h % 8 == 0;
}

OnlineRankerTrainer::OnlineRankerTrainer(LengthRanker& ranker, size_t window, int refit_every)
    : ranker_(ranker), capacity_(window), refit_every_(refit_every) {
  if (window < 1 || refit_every < 1) {
    throw InputError("ranker: window and refit_every must be >= 1");
  }
}

void OnlineRankerTrainer::observe(std::vector<int32_t> prompt_ids, double length) {
  window_.push_back({std::move(prompt_ids), length});
  while (window_.size() > capacity_) window_.pop_front();
}

std::optional<RankerMetrics> OnlineRankerTrainer::end_iteration() {
  if (++iterations_ % refit_every_ != 0 || window_.empty()) return std::nullopt;
  std::vector<LengthExample> train, eval;
  for (const auto& e : window_) (held_out_prompt(e.prompt_ids) ? eval : train).push_back(e);
  if (train.empty()) return std::nullopt;
  return ranker_.fit(train, eval);
}

}  // namespace streamrl::sgs
