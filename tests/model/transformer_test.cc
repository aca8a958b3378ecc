// The two execution paths of the transformer must agree: per-token log-probs from
// the training path equal those from prefill + cached decode, to 1e-4 in fp32.
#include "streamrl/model/transformer.h"

#include <gtest/gtest.h>

#include "streamrl/model/kv_cache.h"

namespace streamrl::model {
namespace {

ModelConfig tiny_config(int64_t heads, int64_t kv_heads, bool tied, bool qkv_bias) {
  ModelConfig c;
  c.vocab_size = 37;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 32 / heads;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  c.attention_bias = qkv_bias;
  if (qkv_bias) c.model_type = "qwen2";  // Qwen2 biases q/k/v only
  c.initializer_range = 0.2;  // large enough that attention patterns are far from uniform
  return c;
}

struct Shape {
  int64_t heads, kv_heads;
  bool tied, bias;
  std::vector<int64_t> lengths;  // one row per entry
  bool left_pad;
  int64_t prefill;  // tokens per row fed at once before decoding one by one
};

class PathAgreement : public testing::TestWithParam<Shape> {};

TEST_P(PathAgreement, TrainingAndCachedLogprobsAgree) {
  const Shape& s = GetParam();
  torch::manual_seed(1);
  ModelConfig cfg = tiny_config(s.heads, s.kv_heads, s.tied, s.bias);
  CausalLM lm(cfg, /*seed=*/7);
  if (s.bias) {
    torch::NoGradGuard g;
    for (auto& p : lm->named_parameters()) {
      if (p.key().ends_with("bias")) p.value().normal_(0, 0.5);
    }
  }
  const int64_t B = s.lengths.size();
  const int64_t T = *std::max_element(s.lengths.begin(), s.lengths.end());
  auto tokens = torch::randint(1, cfg.vocab_size, {B, T}, torch::kLong);
  auto valid = torch::zeros({B, T}, torch::kBool);
  for (int64_t b = 0; b < B; ++b) {
    int64_t start = s.left_pad ? T - s.lengths[b] : 0;
    valid[b].narrow(0, start, s.lengths[b]).fill_(true);
  }
  tokens.masked_fill_(~valid, 0);
  ScoreOutput train = lm->score(tokens, valid);

  // Inference: per row, prefill `prefill` tokens, then decode the rest one token at a time, all
  // rows batched in each step; record log p(next token) from each step's logits.
  torch::NoGradGuard no_grad;
  KVCache cache(cfg, B + 2, T);
  auto slots = torch::arange(B, torch::kLong) + 2;  // not 0..B-1: slots are arbitrary
  std::vector<std::vector<int64_t>> rows(B);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      if (valid[b][t].item<bool>()) rows[b].push_back(tokens[b][t].item<int64_t>());
    }
  }
  std::vector<std::vector<float>> infer(B);
  const int64_t P = s.prefill;
  {
    auto pt = torch::zeros({B, P}, torch::kLong);
    auto pv = torch::zeros({B, P}, torch::kBool);
    auto pp = torch::arange(P, torch::kLong).repeat({B, 1});
    for (int64_t b = 0; b < B; ++b) {
      int64_t n = std::min<int64_t>(P, rows[b].size());
      for (int64_t t = 0; t < n; ++t) pt[b][t] = rows[b][t];
      pv[b].narrow(0, 0, n).fill_(true);
    }
    auto logits = lm->forward_cached(pt, pp, pv, slots, cache);
    auto lp = torch::log_softmax(logits, -1);
    for (int64_t b = 0; b < B; ++b) {
      if (static_cast<int64_t>(rows[b].size()) > P)
        infer[b].push_back(lp[b][rows[b][P]].item<float>());
    }
  }
  for (int64_t pos = P; pos < T; ++pos) {
    std::vector<int64_t> act;
    for (int64_t b = 0; b < B; ++b) {
      if (static_cast<int64_t>(rows[b].size()) > pos + 1) act.push_back(b);
    }
    if (act.empty()) break;
    const int64_t A = act.size();
    auto st = torch::empty({A, 1}, torch::kLong);
    for (int64_t i = 0; i < A; ++i) st[i][0] = rows[act[i]][pos];
    auto act_t = torch::tensor(act, torch::kLong);
    auto logits =
        lm->forward_cached(st, torch::full({A, 1}, pos, torch::kLong),
                           torch::ones({A, 1}, torch::kBool), slots.index_select(0, act_t), cache);
    auto lp = torch::log_softmax(logits, -1);
    for (int64_t i = 0; i < A; ++i)
      infer[act[i]].push_back(lp[i][rows[act[i]][pos + 1]].item<float>());
  }

  for (int64_t b = 0; b < B; ++b) {
    std::vector<float> trained;
    bool first = true;
    for (int64_t t = 0; t < T; ++t) {
      if (!valid[b][t].item<bool>()) continue;
      if (!first) trained.push_back(train.logprobs[b][t].item<float>());
      first = false;
    }
    // Positions before the prefill boundary have no cached counterpart.
    std::vector<float> expected(trained.begin() + std::min<size_t>(P - 1, trained.size()),
                                trained.end());
    ASSERT_EQ(expected.size(), infer[b].size()) << "row " << b;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(expected[i], infer[b][i], 1e-4) << "row " << b << " token " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PathAgreement,
    testing::Values(Shape{4, 4, false, false, {9}, false, 1},          // MHA, one row, decode only
                    Shape{4, 2, true, false, {12, 5, 9}, false, 3},    // GQA 2, right padding
                    Shape{4, 1, false, true, {12, 5, 9, 1}, true, 4},  // MQA, left pad, QKV bias
                    Shape{2, 2, true, true, {16, 16}, false, 16},      // prefill only
                    Shape{8, 2, false, false, {3, 14, 7, 10, 2}, true, 2},  // GQA 4
                    Shape{
                        1, 1, false, true, {10, 6}, false, 3}));  // head size 32: fixed-size kernel

TEST(Transformer, ParameterNamesFollowHuggingFace) {
  CausalLM untied(tiny_config(4, 2, false, true));
  std::set<std::string> names;
  for (auto& [n, t] : untied->named_weights()) names.insert(n);
  for (const char* n :
       {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.q_proj.bias", "model.layers.1.self_attn.k_proj.weight",
        "model.layers.1.self_attn.v_proj.bias", "model.layers.1.self_attn.o_proj.weight",
        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
        "model.layers.0.mlp.down_proj.weight", "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight", "model.norm.weight", "lm_head.weight"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
  EXPECT_FALSE(names.count("model.layers.0.self_attn.o_proj.bias"));
  CausalLM tied(tiny_config(4, 2, true, false));
  for (auto& [n, t] : tied->named_weights()) EXPECT_NE(n, "lm_head.weight");
  EXPECT_EQ(tied->named_weights().size() + 1 + 3 * 2, untied->named_weights().size());
}

TEST(Transformer, InitIsDeterministicInSeed) {
  CausalLM a(tiny_config(4, 2, true, false), 3), b(tiny_config(4, 2, true, false), 3);
  CausalLM c(tiny_config(4, 2, true, false), 4);
  auto wa = a->named_weights(), wb = b->named_weights(), wc = c->named_weights();
  EXPECT_TRUE(torch::equal(wa[0].second, wb[0].second));
  EXPECT_FALSE(torch::equal(wa[0].second, wc[0].second));
}

TEST(Transformer, ScoreIsDifferentiableAndEntropyIsPositive) {
  CausalLM lm(tiny_config(4, 2, true, false));
  auto tokens = torch::randint(37, {2, 6}, torch::kLong);
  auto valid = torch::ones({2, 6}, torch::kBool);
  ScoreOptions opt;
  opt.return_entropy = true;
  opt.return_logits = true;
  ScoreOutput out = lm->score(tokens, valid, opt);
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{2, 6, 37}));
  EXPECT_TRUE((out.entropy.narrow(1, 1, 5) > 0).all().item<bool>());
  EXPECT_EQ(out.logprobs[0][0].item<float>(), 0.0f);
  out.logprobs.sum().backward();
  for (auto& p : lm->parameters()) ASSERT_TRUE(p.grad().defined());
}

// Pipeline stages chain to the whole model: scores and gradients agree, whatever the cut.
TEST(Transformer, StagesChainedEqualScore) {
  ModelConfig c = tiny_config(4, 2, true, false);
  c.num_hidden_layers = 4;
  CausalLM lm(c);
  auto tokens = torch::randint(37, {3, 7}, torch::kLong);
  auto valid = torch::ones({3, 7}, torch::kBool);
  valid[1].narrow(0, 5, 2).fill_(false);
  const torch::Tensor whole = lm->score(tokens, valid).logprobs;
  whole.sum().backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : lm->parameters()) grads.push_back(p.grad().clone()), p.mutable_grad().reset();

  const int cuts[] = {0, 1, 3, 4};
  torch::Tensor h;
  ScoreOutput last;
  for (int s = 0; s < 3; ++s) {
    StageOutput out = lm->score_layers(tokens, valid, h, cuts[s], cuts[s + 1]);
    if (s < 2) EXPECT_FALSE(out.score.logprobs.defined());
    h = out.hidden;
    last = out.score;
  }
  EXPECT_LT((last.logprobs - whole).abs().max().item<double>(), 1e-6);
  last.logprobs.sum().backward();
  size_t i = 0;
  for (auto& p : lm->parameters()) {
    EXPECT_LT((p.grad() - grads[i++]).abs().max().item<double>(), 1e-5);
  }
  EXPECT_THROW(lm->score_layers(tokens, valid, {}, 1, 4), c10::Error);  // no input
  EXPECT_THROW(lm->score_layers(tokens, valid, {}, 0, 5), c10::Error);  // past the end
}

}  // namespace
}  // namespace streamrl::model
