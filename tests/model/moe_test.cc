// Mixture-of-experts layers: grouped expert computation equals a dense loop over all experts
// (values and gradients), adaptive gating spans top-1 (T = 0) to top-2 (T = 1), the auxiliary
// losses match their formulas, training and cached log-probs agree, and each family's HF layout
// (Mixtral, Qwen2-MoE, Qwen3-MoE) round-trips through a checkpoint and parses from real configs.
#include "streamrl/model/moe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "../tiny_model.h"
#include "streamrl/core/errors.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/kv_cache.h"
#include "streamrl/model/transformer.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::model {
namespace {
namespace fs = std::filesystem;
using torch::Tensor;

ModelConfig tiny_moe(const std::string& type) {
  ModelConfig c = testing_util::tiny_model_config(41, 64, 0.2);
  c.model_type = type;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 16;
  c.norm_topk_prob = type != "qwen2_moe";
  if (type == "mixtral") c.moe_intermediate_size = c.intermediate_size;
  if (type == "qwen2_moe") {
    c.attention_bias = true;
    c.shared_expert_intermediate_size = 24;
  }
  c.qk_norm = type == "qwen3_moe";
  c.validate();
  return c;
}

// Every parameter's gradient, flattened into one vector.
Tensor all_grads(torch::nn::Module& m) {
  std::vector<Tensor> g;
  for (auto& p : m.parameters()) {
    g.push_back(p.grad().defined() ? p.grad().reshape({-1}).clone() : torch::zeros({p.numel()}));
  }
  return torch::cat(g);
}

class MoeFamilies : public testing::TestWithParam<std::string> {};

TEST_P(MoeFamilies, GroupedExpertsEqualTheDenseReferenceInValuesAndGradients) {
  torch::manual_seed(3);
  const ModelConfig c = tiny_moe(GetParam());
  for (const GatingConfig g : {GatingConfig{Gating::kTopK, 0}, GatingConfig{Gating::kTop1, 0},
                               GatingConfig{Gating::kAdaptive, 0.2}}) {
    MoeBlock block(c);
    Tensor x = torch::randn({37, c.hidden_size});
    Tensor grouped = block->forward(x, g);
    grouped.square().sum().backward();
    const Tensor grad_grouped = all_grads(*block);
    block->zero_grad();
    Tensor dense = block->forward_dense_reference(x, g);
    dense.square().sum().backward();
    const Tensor grad_dense = all_grads(*block);
    EXPECT_LT((grouped - dense).abs().max().item<double>(), 1e-5) << gating_name(g.kind);
    EXPECT_LT((grad_grouped - grad_dense).abs().max().item<double>(), 1e-4) << gating_name(g.kind);
    EXPECT_GT(grad_grouped.abs().sum().item<double>(), 0.0);
  }
}

TEST_P(MoeFamilies, TrainingAndCachedLogprobsAgree) {
  torch::manual_seed(5);
  const ModelConfig c = tiny_moe(GetParam());
  CausalLM lm(c, 11);
  for (const GatingConfig g :
       {GatingConfig{Gating::kTopK, 0}, GatingConfig{Gating::kAdaptive, 0.2}}) {
    lm->set_gating(g);
    const int64_t T = 12;
    Tensor tokens = torch::randint(1, c.vocab_size, {2, T}, torch::kLong);
    Tensor valid = torch::ones({2, T}, torch::kBool);
    const Tensor train = lm->score(tokens, valid).logprobs;
    torch::NoGradGuard no_grad;
    KVCache cache(c, 2, T);
    Tensor slots = torch::arange(2, torch::kLong);
    for (int64_t t = 0; t + 1 < T; ++t) {  // decode token by token, both rows batched
      Tensor logits =
          lm->forward_cached(tokens.narrow(1, t, 1), torch::full({2, 1}, t, torch::kLong),
                             torch::ones({2, 1}, torch::kBool), slots, cache);
      Tensor lp = torch::log_softmax(logits, -1);
      for (int64_t b = 0; b < 2; ++b) {
        EXPECT_NEAR(lp[b][tokens[b][t + 1].item<int64_t>()].item<double>(),
                    train[b][t + 1].item<double>(), 1e-4)
            << gating_name(g.kind) << " row " << b << " token " << t;
      }
    }
  }
}

TEST_P(MoeFamilies, CheckpointRoundTripKeepsHfNamesAndOutputs) {
  const ModelConfig c = tiny_moe(GetParam());
  CausalLM lm(c, 13);
  {
    torch::NoGradGuard no_grad;  // unit norms and zero biases would hide mixed-up tensors
    for (auto& [name, t] : lm->named_weights()) {
      if (name.ends_with("norm.weight") || name.ends_with(".bias"))
        t.add_(torch::randn_like(t) * 0.1);
    }
  }
  std::set<std::string> names;
  for (const auto& [name, t] : lm->named_weights()) names.insert(name);
  const std::string type = GetParam();
  if (type == "mixtral") {
    EXPECT_TRUE(names.count("model.layers.1.block_sparse_moe.gate.weight"));
    EXPECT_TRUE(names.count("model.layers.0.block_sparse_moe.experts.7.w1.weight"));
    EXPECT_TRUE(names.count("model.layers.0.block_sparse_moe.experts.7.w2.weight"));
    EXPECT_TRUE(names.count("model.layers.0.block_sparse_moe.experts.7.w3.weight"));
  } else {
    EXPECT_TRUE(names.count("model.layers.1.mlp.gate.weight"));
    EXPECT_TRUE(names.count("model.layers.0.mlp.experts.7.gate_proj.weight"));
    EXPECT_TRUE(names.count("model.layers.0.mlp.experts.7.up_proj.weight"));
    EXPECT_TRUE(names.count("model.layers.0.mlp.experts.7.down_proj.weight"));
  }
  EXPECT_EQ(names.count("model.layers.0.mlp.shared_expert.up_proj.weight") +
                names.count("model.layers.0.mlp.shared_expert_gate.weight"),
            type == "qwen2_moe" ? 2u : 0u);
  EXPECT_EQ(names.count("model.layers.0.self_attn.q_norm.weight"), type == "qwen3_moe" ? 1u : 0u);
  EXPECT_EQ(names.count("model.layers.0.mlp.gate_proj.weight"), 0u);  // no dense MLP left

  const fs::path dir =
      fs::temp_directory_path() / ("streamrl_moe_ckpt_" + type + std::to_string(::getpid()));
  fs::remove_all(dir);
  save_checkpoint(dir, lm, tokenizer::make_tokenizer("char")->to_json());
  CausalLM back = load_model(dir);
  EXPECT_EQ(back->config(), c);
  Tensor tokens = torch::randint(1, c.vocab_size, {2, 9}, torch::kLong);
  Tensor valid = torch::ones({2, 9}, torch::kBool);
  EXPECT_TRUE(torch::equal(lm->score(tokens, valid).logprobs, back->score(tokens, valid).logprobs));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, MoeFamilies,
                         testing::Values("mixtral", "qwen2_moe", "qwen3_moe"));

TEST(MoeGating, AdaptiveSpansTopOneToTopTwo) {
  torch::manual_seed(9);
  Tensor probs = torch::softmax(torch::randn({200, 8}) * 2, -1);
  const Routing top1 = route(probs, 2, true, {Gating::kTop1, 0});
  const Routing top2 = route(probs, 2, true, {Gating::kTopK, 0});
  const Routing a0 = route(probs, 2, true, {Gating::kAdaptive, 0.0});
  const Routing a1 = route(probs, 2, true, {Gating::kAdaptive, 1.0});
  EXPECT_TRUE(torch::equal(a0.expert.select(1, 0), top1.expert.select(1, 0)));
  EXPECT_EQ(a0.used.select(1, 1).sum().item<int64_t>(), 0);  // T = 0: nobody takes two
  EXPECT_TRUE(torch::allclose(a0.weight.select(1, 0), top1.weight.select(1, 0)));
  EXPECT_TRUE(torch::equal(a1.expert, top2.expert));  // T = 1: everybody takes two
  EXPECT_TRUE(a1.used.all().item<bool>());
  EXPECT_TRUE(torch::allclose(a1.weight, top2.weight));

  // T = 0.2: exactly the tokens whose normalised top-2 gap is at most 0.2 take two experts.
  const Routing a = route(probs, 2, false, {Gating::kAdaptive, 0.2});
  auto [p, e] = probs.topk(2, -1);
  const Tensor gap = (p.select(1, 0) - p.select(1, 1)) / (p.select(1, 0) + p.select(1, 1));
  EXPECT_TRUE(torch::equal(a.used.select(1, 1), gap <= 0.2));
  const double share = a.used.select(1, 1).to(torch::kFloat).mean().item<double>();
  EXPECT_GT(share, 0.05);
  EXPECT_LT(share, 0.95);
  // Without renormalisation the weights are the raw probabilities of the chosen experts.
  EXPECT_TRUE(torch::allclose(a.weight, p.masked_fill(~a.used, 0.0)));
  EXPECT_THROW(parse_gating("top3"), InputError);
  EXPECT_EQ(parse_gating("adaptive"), Gating::kAdaptive);
}

TEST(MoeAuxLoss, MatchesTheFormulasOnAHandMadeRouting) {
  // Two tokens, two experts: token 0 prefers expert 0, token 1 expert 1, both take both.
  Tensor logits = torch::tensor({{2.0f, 0.0f}, {0.0f, 1.0f}});
  MoeLayerTrace t;
  t.logits = logits;
  t.probs = torch::softmax(logits, -1);
  t.routing = route(t.probs, 2, true, {Gating::kTopK, 0});
  const auto aux = moe_aux_losses({t}, torch::ones({2}, torch::kBool), 2);
  const Tensor P = t.probs.mean(0);
  // All assignments: each expert has 2 of 4 slots over 2 tokens, f = 1 each.
  EXPECT_NEAR(aux.load_balance.item<double>(), 2 * (1.0 * P[0] + 1.0 * P[1]).item<double>(), 1e-6);
  // Top-1 only: f = 0.5 each.
  EXPECT_NEAR(aux.load_balance_top1.item<double>(), 2 * (0.5 * P[0] + 0.5 * P[1]).item<double>(),
              1e-6);
  const double z =
      (std::pow(std::log(std::exp(2.0) + 1.0), 2) + std::pow(std::log(1.0 + std::exp(1.0)), 2)) / 2;
  EXPECT_NEAR(aux.z_loss.item<double>(), z, 1e-5);
  ASSERT_EQ(aux.two_expert_share.size(), 1u);
  EXPECT_DOUBLE_EQ(aux.two_expert_share[0], 1.0);
  // Padding tokens do not count.
  const auto one = moe_aux_losses({t}, torch::tensor({true, false}), 2);
  EXPECT_NEAR(one.z_loss.item<double>(), std::pow(std::log(std::exp(2.0) + 1.0), 2), 1e-5);
}

TEST(MoeAuxLoss, ExpertLoadAndPerRowTwoExpertShares) {
  // Four tokens of a [2, 2] batch, the last one padding; four experts.
  MoeLayerTrace t;
  t.logits = torch::zeros({4, 4});
  t.probs = torch::full({4, 4}, 0.25f);
  t.routing.expert = torch::tensor({{0, 1}, {0, 2}, {0, 3}, {1, 2}}, torch::kLong);
  t.routing.used = torch::tensor({true, true, true, false, true, false, true, true}).view({4, 2});
  t.routing.weight = t.routing.used.to(torch::kFloat32);
  const auto aux = moe_aux_losses({t, t}, torch::tensor({true, true, true, false}).view({2, 2}), 4);
  // Valid assignments: expert 0 three times, expert 1 once: busiest 3 over a mean of 1.
  ASSERT_EQ(aux.expert_load.size(), 2u);
  EXPECT_DOUBLE_EQ(aux.expert_load[0], 3.0);
  EXPECT_DOUBLE_EQ(aux.two_expert_share[1], 1.0 / 3);
  // Row 0: one of its two tokens on two experts; row 1: its one valid token on one.
  ASSERT_EQ(aux.two_expert_by_row.sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_FLOAT_EQ(aux.two_expert_by_row[0][0].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(aux.two_expert_by_row[0][1].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(aux.two_expert_by_row[1][0].item<float>(), 0.0f);
}

TEST(MoeAuxLoss, ScoreReportsRouterLossesThatReachTheRouter) {
  const ModelConfig c = tiny_moe("qwen3_moe");
  CausalLM lm(c, 2);
  Tensor tokens = torch::randint(1, c.vocab_size, {2, 7}, torch::kLong);
  const ScoreOutput out = lm->score(tokens, torch::ones({2, 7}, torch::kBool));
  ASSERT_TRUE(out.moe.has_value());
  EXPECT_EQ(out.moe->two_expert_share.size(), 2u);  // both layers have experts
  MoeOptions off;
  EXPECT_EQ(off.loss(out.moe).item<double>(), 0.0);
  MoeOptions on;
  on.aux_loss_coef = 0.01;
  on.z_loss_coef = 0.001;
  const Tensor loss = on.loss(out.moe);
  EXPECT_GT(loss.item<double>(), 0.0);
  loss.backward();
  bool router_grad = false;
  for (const auto& p : lm->named_parameters()) {
    if (p.key().ends_with("mlp.gate.weight") && p.value().grad().defined()) {
      router_grad = router_grad || p.value().grad().abs().sum().item<double>() > 0;
    }
  }
  EXPECT_TRUE(router_grad);
}

// Pipeline stages of an MoE model (layer 0 dense, 1-3 with experts, cut after layer 1): chained,
// they score as the whole model, each replays its own layers' routing, and their router losses
// and statistics add up to the whole model's.
TEST(MoeAuxLoss, PipelineStagesAddUpToTheWholeModel) {
  ModelConfig c = tiny_moe("qwen3_moe");
  c.num_hidden_layers = 4;
  c.mlp_only_layers = {0};
  c.validate();
  CausalLM lm(c, 5);
  torch::manual_seed(3);
  const Tensor tokens = torch::randint(1, c.vocab_size, {2, 7}, torch::kLong);
  Tensor valid = torch::ones({2, 7}, torch::kBool);
  valid[1].narrow(0, 5, 2).fill_(false);
  // Replayed routing: each MoE layer sends every token to experts (l, l + 1).
  std::vector<Tensor> replay;
  for (int64_t l = 0; l < 3; ++l) {
    replay.push_back(torch::tensor({l, l + 1}, torch::kLong).expand({2, 7, 2}).contiguous());
  }
  ScoreOptions opt;
  opt.replay_routing = &replay;
  const ScoreOutput whole = lm->score(tokens, valid, opt);
  const StageOutput first = lm->score_layers(tokens, valid, Tensor(), 0, 2, opt);
  const StageOutput last = lm->score_layers(tokens, valid, first.hidden, 2, 4, opt);
  EXPECT_TRUE(torch::allclose(last.score.logprobs, whole.logprobs, 1e-5, 1e-6));
  ASSERT_TRUE(first.moe && last.score.moe && whole.moe);
  EXPECT_EQ(first.moe->first_layer, 0);
  EXPECT_EQ(last.score.moe->first_layer, 1);
  EXPECT_EQ(last.score.moe->two_expert_share.size(), 2u);
  EXPECT_NEAR((first.moe->z_loss + last.score.moe->z_loss).item<double>(),
              whole.moe->z_loss.item<double>(), 1e-5);
  EXPECT_NEAR((first.moe->load_balance + last.score.moe->load_balance).item<double>(),
              whole.moe->load_balance.item<double>(), 1e-5);
  MoeStats one, staged, stage0, stage1;
  one.add(*whole.moe, false, 10);
  stage0.add(*first.moe, false, 10);
  stage1.add(*last.score.moe, false, 10);
  // Merged as processes merge them: the element-wise sum of their values.
  std::vector<double> sum = stage0.to_values(3);
  const std::vector<double> other = stage1.to_values(3);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += other[i];
  staged = MoeStats::from_values(sum);
  const nlohmann::json a = one.to_json(true), b = staged.to_json(true);
  for (const char* key : {"aux_loss", "z_loss"}) {
    EXPECT_NEAR(b[key].get<double>(), a[key].get<double>(), 1e-5) << key;
  }
  for (const char* key : {"two_expert_share", "expert_load"}) {
    ASSERT_EQ(b[key].size(), 3u) << key;
    for (size_t l = 0; l < 3; ++l)
      EXPECT_NEAR(b[key][l].get<double>(), a[key][l].get<double>(), 1e-9);
  }
  // Every token went where the replay said: none differed, 3 layers x 12 tokens compared.
  EXPECT_EQ(b["routing_mismatch"], a["routing_mismatch"]);
  EXPECT_THROW(MoeStats::from_values({1.0, 2.0}), InputError);
}

TEST(MoeConfig, SparseStepAndDenseLayers) {
  ModelConfig c = tiny_moe("qwen3_moe");
  c.num_hidden_layers = 4;
  c.decoder_sparse_step = 2;
  c.mlp_only_layers = {3};
  EXPECT_FALSE(c.moe_layer(0));
  EXPECT_TRUE(c.moe_layer(1));
  EXPECT_FALSE(c.moe_layer(2));
  EXPECT_FALSE(c.moe_layer(3));  // listed dense
  CausalLM lm(c, 1);
  std::set<std::string> names;
  for (const auto& [name, t] : lm->named_weights()) names.insert(name);
  EXPECT_TRUE(names.count("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_TRUE(names.count("model.layers.1.mlp.experts.0.gate_proj.weight"));
  EXPECT_TRUE(names.count("model.layers.3.mlp.down_proj.weight"));
}

// Fields of real checkpoints' config.json (Mixtral-8x7B-v0.1, Qwen1.5-MoE-A2.7B, Qwen3-30B-A3B),
// sizes cut down so the test stays small.
TEST(MoeConfig, ParsesEachFamilysConfigJson) {
  const auto mixtral = parse_model_config(nlohmann::json::parse(R"({
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 32000,
    "hidden_size": 64, "intermediate_size": 112, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32768,
    "num_local_experts": 8, "num_experts_per_tok": 2, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02, "sliding_window": null, "rms_norm_eps": 1e-05,
    "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2})"),
                                          "mixtral.json");
  EXPECT_EQ(mixtral.num_experts, 8);
  EXPECT_EQ(mixtral.moe_intermediate_size, 112);
  EXPECT_TRUE(mixtral.norm_topk_prob);
  EXPECT_EQ(mixtral.architecture(), "MixtralForCausalLM");
  EXPECT_DOUBLE_EQ(mixtral.router_aux_loss_coef, 0.02);

  const auto qwen2 = parse_model_config(nlohmann::json::parse(R"({
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "vocab_size": 151936,
    "hidden_size": 64, "intermediate_size": 160, "moe_intermediate_size": 24,
    "shared_expert_intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 4, "num_experts": 60, "num_experts_per_tok": 4,
    "norm_topk_prob": false, "decoder_sparse_step": 1, "use_sliding_window": false,
    "max_position_embeddings": 8192, "rope_theta": 1000000.0, "tie_word_embeddings": false})"),
                                        "qwen2_moe.json");
  EXPECT_EQ(qwen2.num_experts, 60);
  EXPECT_EQ(qwen2.shared_expert_intermediate_size, 96);
  EXPECT_TRUE(qwen2.attention_bias);
  EXPECT_FALSE(qwen2.norm_topk_prob);

  const auto qwen3 = parse_model_config(nlohmann::json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 151936,
    "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 24, "head_dim": 16,
    "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
    "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "attention_bias": false,
    "max_position_embeddings": 40960, "rope_theta": 1000000.0, "tie_word_embeddings": false})"),
                                        "qwen3_moe.json");
  EXPECT_EQ(qwen3.num_experts_per_tok, 8);
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_EQ(qwen3.head_dim, 16);
  for (const ModelConfig* m : {&mixtral, &qwen2, &qwen3}) {  // config.json round trip
    EXPECT_EQ(parse_model_config(to_json(*m), "round trip"), *m) << m->model_type;
  }

  auto bad = to_json(qwen3);
  bad["num_experts_per_tok"] = 200;
  try {
    parse_model_config(bad, "q.json");
    ADD_FAILURE() << "k > num_experts accepted";
  } catch (const InputError& e) {
    EXPECT_NE(
        std::string(e.what()).find("num_experts_per_tok (200) must be in 1..num_experts (128)"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace streamrl::model
