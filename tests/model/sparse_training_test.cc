// DSV on the training path: sparse heads with every block kept score (values and gradients) as
// dense, padding included; with few blocks only rows long enough change; the trainer fits the
// predictors without touching the model and switches heads by its thresholds; checkpoints keep
// the predictors and the sparse heads.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../tiny_model.h"
#include "streamrl/core/errors.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/kv_cache.h"
#include "streamrl/model/sparse_training.h"
#include "streamrl/model/transformer.h"

namespace streamrl::model {
namespace {

using torch::Tensor;
namespace fs = std::filesystem;

SparseAttentionConfig train_config(int64_t keep, int64_t min_tokens) {
  SparseAttentionConfig c;
  c.rank = 4;
  c.train.block = 4;
  c.train.keep = keep;
  c.train.recent = 1;
  c.min_tokens = min_tokens;
  return c;
}

// Three rows of 40 positions: full, left-padded by 10, right-padded by 28 (12 valid tokens).
std::pair<Tensor, Tensor> padded_batch() {
  torch::manual_seed(11);
  const Tensor tokens = torch::randint(3, 29, {3, 40}, torch::kLong);
  Tensor valid = torch::ones({3, 40}, torch::kBool);
  valid[1].narrow(0, 0, 10).fill_(false);
  valid[2].narrow(0, 12, 28).fill_(false);
  return {tokens, valid};
}

// Summed log-probs and the gradient of every weight, by name.
std::pair<Tensor, std::map<std::string, Tensor>> score_and_grads(CausalLM& lm) {
  const auto [tokens, valid] = padded_batch();
  lm->zero_grad();
  const Tensor lp = lm->score(tokens, valid).logprobs;
  lp.sum().backward();
  std::map<std::string, Tensor> grads;
  for (const auto& p : lm->named_parameters()) grads[p.key()] = p.value().grad().clone();
  return {lp.detach(), grads};
}

void expect_same_scores(CausalLM& a, CausalLM& b, double tol) {
  const auto [lp_a, g_a] = score_and_grads(a);
  const auto [lp_b, g_b] = score_and_grads(b);
  EXPECT_LT((lp_a - lp_b).abs().max().item<double>(), tol);
  for (const auto& [name, g] : g_a) {  // float sums in another order: relative to the gradient
    EXPECT_LT((g - g_b.at(name)).abs().max().item<double>(),
              tol * (1 + g.abs().max().item<double>()))
        << name;
  }
}

TEST(SparseTraining, KeepingEveryBlockScoresAsDense) {
  CausalLM dense = testing_util::tiny_model(3, 29, 128);
  CausalLM sparse = testing_util::tiny_model(3, 29, 128);
  // 40 tokens are 10 blocks of 4: keeping 10 keeps every causal block.
  sparse->enable_sparse_attention(train_config(/*keep=*/10, /*min_tokens=*/0), 2);
  expect_same_scores(dense, sparse, 1e-5);
  // Some heads sparse, some dense (query heads 0 and 2 share no kv head).
  sparse->set_sparse_heads(0, torch::tensor({true, false, true, false}));
  sparse->set_sparse_heads(1, torch::tensor({false, false, false, true}));
  expect_same_scores(dense, sparse, 1e-5);
}

TEST(SparseTraining, FewBlocksChangeOnlyRowsOfMinTokens) {
  CausalLM dense = testing_util::tiny_model(3, 29, 128);
  CausalLM sparse = testing_util::tiny_model(3, 29, 128);
  sparse->enable_sparse_attention(train_config(/*keep=*/3, /*min_tokens=*/20), 2);
  const auto [tokens, valid] = padded_batch();
  torch::NoGradGuard no_grad;
  const Tensor a = dense->score(tokens, valid).logprobs, b = sparse->score(tokens, valid).logprobs;
  // Rows 0 and 1 (40 and 30 tokens) attend to 3 of up to 10 blocks; row 2 (12 tokens) stays dense.
  EXPECT_GT((a[0] - b[0]).abs().max().item<double>(), 1e-4);
  EXPECT_GT((a[1] - b[1]).abs().max().item<double>(), 1e-4);
  EXPECT_LT((a[2] - b[2]).abs().max().item<double>(), 1e-5);
  EXPECT_TRUE(torch::isfinite(b).all().item<bool>());
  // The first query blocks have no more than 3 causal blocks: their tokens equal dense.
  EXPECT_LT((a[0].narrow(0, 0, 12) - b[0].narrow(0, 0, 12)).abs().max().item<double>(), 1e-5);
}

// Rows from 2048 tokens attend in tiles, one row at a time (no [T, T] mask): the logits at each
// row's last token equal a prefill through the KV cache, for a full, a left-padded and a short row.
TEST(SparseTraining, LongRowsScoreAsTheCachedPath) {
  CausalLM lm = testing_util::tiny_model(3, 29, 2200);
  torch::manual_seed(12);
  const int64_t T = 2100;
  const Tensor tokens = torch::randint(3, 29, {3, T}, torch::kLong);
  Tensor valid = torch::ones({3, T}, torch::kBool);
  valid[1].narrow(0, 0, 40).fill_(false);
  valid[2].narrow(0, 20, T - 20).fill_(false);
  torch::NoGradGuard no_grad;
  const Tensor logits = lm->score(tokens, valid, {.return_logits = true}).logits;
  const std::vector<std::pair<int64_t, int64_t>> spans = {{0, T}, {40, T - 40}, {0, 20}};
  for (int64_t b = 0; b < 3; ++b) {
    const auto [s, S] = spans[static_cast<size_t>(b)];
    KVCache cache(lm->config(), 1, S);
    const Tensor row = tokens[b].narrow(0, s, S).view({1, S});
    const Tensor cached = lm->forward_cached(row, torch::arange(S, torch::kLong).view({1, S}),
                                             torch::ones({1, S}, torch::kBool),
                                             torch::zeros({1}, torch::kLong), cache);
    EXPECT_LT((logits[b][s + S - 1] - cached[0]).abs().max().item<double>(), 1e-4) << "row " << b;
  }
}

// A padded batch whose batched scores would pass 32 MiB (3 rows x 4 heads x 1200^2 floats) attends
// row by row on each row's span: log-probs and gradients equal each row scored alone (batched).
TEST(SparseTraining, LargePaddedBatchesScoreAsTheirRowsAlone) {
  CausalLM lm = testing_util::tiny_model(3, 29, 1300);
  torch::manual_seed(13);
  const int64_t T = 1200;
  const Tensor tokens = torch::randint(3, 29, {3, T}, torch::kLong);
  Tensor valid = torch::ones({3, T}, torch::kBool);
  valid[1].narrow(0, 0, 500).fill_(false);        // left-padded: 700 valid
  valid[2].narrow(0, 300, T - 300).fill_(false);  // right-padded: 300 valid
  const Tensor batched = lm->score(tokens, valid).logprobs;
  batched.sum().backward();
  std::vector<Tensor> grads;
  for (const auto& p : lm->parameters())
    grads.push_back(p.grad().clone()), p.mutable_grad() = Tensor();
  const std::vector<std::pair<int64_t, int64_t>> spans = {{0, T}, {500, 700}, {0, 300}};
  for (int64_t b = 0; b < 3; ++b) {
    const auto [s, S] = spans[static_cast<size_t>(b)];
    const Tensor alone =
        lm->score(tokens[b].narrow(0, s, S).view({1, S}), torch::ones({1, S}, torch::kBool))
            .logprobs;
    alone.sum().backward();
    EXPECT_LT((batched[b].narrow(0, s, S) - alone[0]).abs().max().item<double>(), 1e-4)
        << "row " << b;
  }
  const auto params = lm->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_LT((params[i].grad() - grads[i]).abs().max().item<double>(),
              1e-4 * (1 + grads[i].abs().max().item<double>()))
        << "parameter " << i;
  }
}

SparseTrainingOptions trainer_options(double sparsity_threshold) {
  SparseTrainingOptions o;
  o.enabled = true;
  o.attention = train_config(/*keep=*/3, /*min_tokens=*/0);
  o.stride = 4;
  o.lr = 1e-2;
  o.momentum = 0;  // metrics show the last observation
  o.warmup_steps = 3;
  o.loss_threshold = 10;
  o.min_coverage = 0;
  o.sparsity_threshold = sparsity_threshold;
  return o;
}

// One observation: a forward that captures, then the trainer's step.
void observe(CausalLM& lm, SparseAttentionTrainer& trainer) {
  const auto [tokens, valid] = padded_batch();
  std::vector<AttentionCapture> captured;
  ScoreOptions options;
  options.capture = &captured;
  lm->score(tokens, valid, options).logprobs.sum().backward();
  trainer.observe(captured, valid);
}

TEST(SparseTraining, TrainerFitsPredictorsAndSwitchesHeadsOnlyByItsThresholds) {
  CausalLM lm = testing_util::tiny_model(3, 29, 128);
  CausalLM reference = testing_util::tiny_model(3, 29, 128);
  SparseAttentionTrainer trainer(lm, trainer_options(/*sparsity_threshold=*/0.0));
  ASSERT_TRUE(lm->sparse_attention());
  EXPECT_FALSE(lm->sparse_heads(0).any().item<bool>());  // dense while the predictors learn
  observe(lm, trainer);
  const double first = trainer.metrics()["layers"][0]["predictor_loss"].get<double>();
  observe(lm, trainer);
  EXPECT_FALSE(lm->sparse_heads(0).any().item<bool>());  // still warming up
  for (int i = 0; i < 40; ++i) observe(lm, trainer);
  const nlohmann::json m = trainer.metrics();
  EXPECT_LT(m["layers"][0]["predictor_loss"].get<double>(), 0.7 * first) << m.dump();
  EXPECT_EQ(m["sparse_heads"], 8) << m.dump();
  EXPECT_EQ(m["layers"][1]["sparse_heads"], nlohmann::json({0, 1, 2, 3}));
  const double sparsity = m["layers"][0]["sparsity"].get<double>();
  EXPECT_GT(sparsity, 0.0);
  EXPECT_LT(sparsity, 1.0);
  // Recall: coverage over the best block choice's for the same rows, so in (0, 1].
  for (const auto& layer : m["layers"]) {
    EXPECT_GT(layer["recall"].get<double>(), 0.0) << m.dump();
    EXPECT_LE(layer["recall"].get<double>(), 1.0 + 1e-6) << m.dump();
  }
  EXPECT_EQ(testing_util::max_param_diff(lm, reference), 0.0);  // the model itself never moves

  // No head is ever completely sparse: a threshold of 1 switches none.
  CausalLM strict = testing_util::tiny_model(3, 29, 128);
  SparseAttentionTrainer never(strict, trainer_options(/*sparsity_threshold=*/1.0));
  for (int i = 0; i < 6; ++i) observe(strict, never);
  EXPECT_EQ(never.metrics()["sparse_heads"], 0);

  // The profile survives a state round trip.
  CausalLM again = testing_util::tiny_model(3, 29, 128);
  SparseAttentionTrainer resumed(again, trainer_options(0.0));
  resumed.restore(trainer.state());
  EXPECT_EQ(resumed.metrics()["observed"], 42);
  EXPECT_NEAR(resumed.metrics()["layers"][1]["coverage"].get<double>(),
              m["layers"][1]["coverage"].get<double>(), 1e-9);
  EXPECT_NEAR(resumed.metrics()["layers"][1]["recall"].get<double>(),
              m["layers"][1]["recall"].get<double>(), 1e-6);
}

TEST(SparseTraining, OptionsRejectBadValues) {
  SparseTrainingOptions o;
  EXPECT_THROW(o.read(core::Config::from_string("{keep: 1, recent: 1}")), InputError);
  EXPECT_THROW(o.read(core::Config::from_string("{theta: 0}")), InputError);
  EXPECT_THROW(o.read(core::Config::from_string("{sparsity_threshold: 2}")), InputError);
  EXPECT_THROW(o.read(core::Config::from_string("{recall_every: 0}")), InputError);
  SparseTrainingOptions ok;
  ok.read(core::Config::from_string("{enabled: true, rank: 8, decode: {keep: 4}}"));
  EXPECT_TRUE(ok.enabled);
  EXPECT_EQ(ok.attention.rank, 8);
  EXPECT_EQ(ok.attention.decode.keep, 4);
  EXPECT_THROW(o.read(core::Config::from_string("{dispatch: guess}")), InputError);
}

// dispatch: measured takes min_tokens from the speed-up table of this model's layer shape, and
// the trainer's metrics show the table; a model that already has predictors keeps its length.
TEST(SparseTraining, MeasuredDispatchTakesMinTokensFromTheTable) {
  CausalLM lm = testing_util::tiny_model(3, 29, 256);
  SparseTrainingOptions o;
  o.read(
      core::Config::from_string("{enabled: true, rank: 4, block: 32, keep: 2, recent: 0, "
                                "min_tokens: 7, dispatch: measured}"));
  auto trainer = start_sparse_attention(lm, o, nlohmann::json(), 1);
  const nlohmann::json m = trainer->metrics();
  ASSERT_TRUE(m.contains("dispatch")) << m.dump();
  EXPECT_EQ(m["dispatch"]["table"].size(), 3u);  // 64, 128, 256 tokens
  EXPECT_EQ(m["min_tokens"], m["dispatch"]["min_tokens"]);
  EXPECT_EQ(lm->sparse_attention()->min_tokens, m["min_tokens"].get<int64_t>());
  EXPECT_NE(lm->sparse_attention()->min_tokens, 7);
  auto again = start_sparse_attention(lm, o, nlohmann::json(), 1);
  EXPECT_EQ(again->metrics()["dispatch"]["from"], "checkpoint");
}

TEST(SparseTraining, CheckpointKeepsPredictorsAndSparseHeads) {
  const fs::path dir = fs::temp_directory_path() / ("sparse_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  CausalLM lm = testing_util::tiny_model(3, 29, 128);
  lm->enable_sparse_attention(train_config(3, 64), 7, /*all_heads=*/false);
  lm->set_sparse_heads(1, torch::tensor({true, false, false, true}));
  save_checkpoint(dir / "a", lm, "{}");
  CausalLM back = load_model(dir / "a");
  ASSERT_TRUE(back->sparse_attention());
  EXPECT_EQ(back->sparse_attention()->min_tokens, 64);
  EXPECT_EQ(back->sparse_attention()->train.keep, 3);
  EXPECT_TRUE(back->sparse_heads(1).equal(lm->sparse_heads(1)));
  EXPECT_FALSE(back->sparse_heads(0).any().item<bool>());
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_TRUE(back->sparse_predictors()[l]->parameters()[0].equal(
        lm->sparse_predictors()[l]->parameters()[0]));
  }
  // A dense model writes none and loads none.
  CausalLM plain = testing_util::tiny_model(3, 29, 128);
  save_checkpoint(dir / "b", plain, "{}");
  EXPECT_FALSE(fs::exists(dir / "b" / "sparse_attention.json"));
  EXPECT_FALSE(load_model(dir / "b")->sparse_attention());
  // A corrupt file is a one-line error naming it, and the model is left as it was.
  std::ofstream(dir / "a" / "sparse_attention.json") << "{\"rank\": 4}";
  EXPECT_THROW(load_sparse_attention(plain, dir / "a"), InputError);
  EXPECT_FALSE(plain->sparse_attention());
  std::ofstream(dir / "a" / "sparse_attention.json")
      << R"({"rank": 4, "block": 4, "keep": 1, "recent": 1, "min_tokens": 0,
             "decode": {"block": 4, "keep": 2, "recent": 4}})";
  EXPECT_THROW(load_sparse_attention(plain, dir / "a"), InputError);  // keep must exceed recent
  EXPECT_FALSE(plain->sparse_attention());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace streamrl::model
