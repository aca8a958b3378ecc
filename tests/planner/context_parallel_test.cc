// Sparsity-aware context parallelism (DSV §7): LPT head allocation against brute force, the cost
// model against hand computations, the hybrid's choice where the answer is known, sizing, bad
// input, and the `context_parallel` plan section.
#include "streamrl/planner/context_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"
#include "streamrl/planner/plan.h"

namespace streamrl::planner {
namespace {

// The best max load over all bins^n assignments.
double brute_force_max_load(const std::vector<double>& w, int bins) {
  std::vector<double> loads(bins, 0.0);
  double best = std::numeric_limits<double>::infinity();
  std::function<void(size_t)> go = [&](size_t i) {
    if (i == w.size()) {
      best = std::min(best, *std::max_element(loads.begin(), loads.end()));
      return;
    }
    for (int b = 0; b < bins; ++b) {
      loads[b] += w[i];
      go(i + 1);
      loads[b] -= w[i];
    }
  };
  go(0);
  return best;
}

TEST(ContextParallel, LptAgainstBruteForce) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> sparsity(0.0, 0.99);
  int optimal = 0, cases = 0;
  for (int bins = 1; bins <= 3; ++bins) {
    for (int n = 1; n <= 7; ++n) {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<double> w(n);
        for (double& x : w) x = 1 - sparsity(rng);  // a head's burden
        const LptResult r = lpt_assign(w, bins);
        // Every item in exactly one bin, loads add up.
        std::vector<int> seen(n, 0);
        double total = 0;
        for (int b = 0; b < bins; ++b) {
          double load = 0;
          for (int i : r.bins[b]) {
            ++seen[i];
            load += w[i];
          }
          EXPECT_NEAR(load, r.loads[b], 1e-12);
          total += load;
        }
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), n);
        const double opt = brute_force_max_load(w, bins);
        EXPECT_GE(r.max_load, opt - 1e-12);
        EXPECT_LE(r.max_load, (4.0 / 3 - 1.0 / (3 * bins)) * opt + 1e-12);  // Graham's bound
        if (n <= bins || bins == 1) EXPECT_NEAR(r.max_load, opt, 1e-12);
        optimal += std::abs(r.max_load - opt) < 1e-12;
        ++cases;
      }
    }
  }
  EXPECT_GT(optimal, cases * 3 / 4);  // LPT is usually exact on heads
  // Graham's tight example: LPT 11 where 9 is possible ({5,4}, {5,4}, {3,3,3}).
  const std::vector<double> tight = {5, 5, 4, 4, 3, 3, 3};
  EXPECT_DOUBLE_EQ(brute_force_max_load(tight, 3), 9);
  EXPECT_DOUBLE_EQ(lpt_assign(tight, 3).max_load, 11);
}

TEST(ContextParallel, LptBalancesHeadsBySparsity) {
  CpLayer l;
  l.seq_len = 4096;
  l.heads = l.kv_heads = 8;
  l.sparsity = {0.9, 0.9, 0.9, 0.9, 0, 0, 0, 0};
  CpDevice d;
  d.sparse_efficiency = 1;  // burden exactly 1 - s
  const CpOption o = cost_cp_option(l, d, 4, 1, CpPlacement::kHcpInner);
  // Index order puts both dense heads of 4,5 and of 6,7 together: 2; LPT pairs dense with sparse.
  EXPECT_NEAR(o.naive_max_load, 2.0, 1e-12);
  EXPECT_NEAR(o.max_load, 1.1, 1e-12);
  EXPECT_NEAR(o.mean_load, 1.1, 1e-12);
  for (const auto& heads : o.heads_per_rank) {
    ASSERT_EQ(heads.size(), 2u);
    EXPECT_LT(heads[0], 4);
    EXPECT_GE(heads[1], 4);
  }
  // A sparse kernel at half the dense speed per useful FLOP: a 0.9 head costs 0.2, a 0.3 head
  // would cost 1.4 and so runs dense.
  d.sparse_efficiency = 0.5;
  l.sparsity = {0.9, 0.3, 0, 0, 0, 0, 0, 0};
  const std::vector<double> c = head_costs(l, d);
  EXPECT_NEAR(c[0], 0.2, 1e-12);
  EXPECT_DOUBLE_EQ(c[1], 1.0);
  EXPECT_DOUBLE_EQ(c[2], 1.0);
}

TEST(ContextParallel, DenseHcpMatchesHandComputation) {
  CpLayer l;
  l.seq_len = 8192;
  l.heads = l.kv_heads = 8;
  l.head_dim = 64;
  l.layers = 2;
  CpDevice d;
  d.peak_flops = 100e12;
  d.attention_efficiency = 0.5;
  d.intra = {100e9, 5e-6, 0};
  d.node_size = 8;
  const double S = 8192, D = 64, b = 2;
  for (CpSplit split : {CpSplit::kZigzag, CpSplit::kContiguous}) {
    const CpOption o = cost_cp_option(l, d, 4, 1, CpPlacement::kHcpInner, split);
    ASSERT_TRUE(o.feasible);
    EXPECT_TRUE(o.head_units_are_kv_groups);
    EXPECT_DOUBLE_EQ(o.max_load, 2);
    // Each rank: 2 heads over the whole causal sequence, 4·D FLOPs a pair, backward 2.5x.
    const double compute = 2 * (S * S / 2) * 4 * D * 3.5 / (100e12 * 0.5);
    // Q,K,V in: 3/4 of the sequence for its 2 heads of each; O out the same for 2 heads; twice.
    const double qkv = S * 3 / 4 * (2 + 2 * 2) * D * b, o_bytes = S * 3 / 4 * 2 * D * b;
    const double comm = 2 * (qkv / 100e9 + 5e-6 + o_bytes / 100e9 + 5e-6);
    EXPECT_NEAR(o.hcp_bytes, 2 * (qkv + o_bytes), 1e-6);
    EXPECT_NEAR(o.compute_s, 2 * compute, 1e-12);
    EXPECT_NEAR(o.hcp_comm_s, 2 * comm, 1e-12);
    EXPECT_DOUBLE_EQ(o.scp_comm_s, 0);
    EXPECT_NEAR(o.step_s, 2 * (compute + comm), 1e-12);
    // Activations: 34 bytes per hidden unit per token per layer.
    EXPECT_NEAR(o.memory_bytes, 2 * (S / 4) * 34 * 8 * D, 1e-3);
  }
}

TEST(ContextParallel, SparsityCutsScpRemoteKeysByItsComplement) {
  CpLayer l;
  l.seq_len = 16384;
  l.heads = 8;
  l.kv_heads = 8;
  l.head_dim = 128;
  CpDevice d;
  d.sparse_efficiency = 1;
  const CpOption dense = cost_cp_option(l, d, 1, 4, CpPlacement::kHcpInner);
  // The busiest rank gathers 3/4 of the sequence's K and V for 8 heads, returns dK, dV.
  EXPECT_NEAR(dense.scp_kv_bytes, 4 * (16384.0 * 3 / 4) * 8 * 128 * 2, 1e-3);
  EXPECT_DOUBLE_EQ(dense.scp_index_bytes, 0);
  l.sparsity = {0.75};
  const CpOption sparse = cost_cp_option(l, d, 1, 4, CpPlacement::kHcpInner);
  EXPECT_NEAR(sparse.scp_kv_bytes / dense.scp_kv_bytes, 0.25, 1e-12);
  EXPECT_NEAR(sparse.scp_index_bytes, 0.25 * (16384.0 * 3 / 4) * 8 * 4, 1e-6);
  EXPECT_NEAR(sparse.compute_s / dense.compute_s, 0.25, 1e-12);
  EXPECT_LT(sparse.scp_comm_s, dense.scp_comm_s);
  // Grouped queries: a KV head is gathered for the least sparse of its query heads.
  l.heads = 8;
  l.kv_heads = 4;
  l.sparsity = {0.9, 0.5, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9};
  const CpOption gqa = cost_cp_option(l, d, 1, 4, CpPlacement::kHcpInner);
  EXPECT_NEAR(gqa.scp_kv_bytes, 4 * (16384.0 * 3 / 4) * (0.5 + 0.1 * 3) * 128 * 2, 1e-3);
}

TEST(ContextParallel, ZigzagBalancesTheCausalMask) {
  CpLayer l;
  l.seq_len = 8192;
  CpDevice d;
  const CpOption zig = cost_cp_option(l, d, 1, 4, CpPlacement::kHcpInner, CpSplit::kZigzag);
  const CpOption con = cost_cp_option(l, d, 1, 4, CpPlacement::kHcpInner, CpSplit::kContiguous);
  // The contiguous split's last rank has (4 - 1/2)/16 of S² pairs, the zig-zag's every rank 1/8.
  EXPECT_NEAR(con.compute_s / zig.compute_s, (3.5 / 16) / (1.0 / 8), 1e-12);
}

TEST(ContextParallel, HybridPicksHcpForDenseHeadsAndScpWhenHeadsRunOut) {
  CpLayer l;
  l.seq_len = 65536;
  l.heads = l.kv_heads = 32;
  CpDevice d;  // one 8-device node
  // Dense: every factorisation computes the same (zig-zag, heads divide evenly), and Ulysses moves
  // 4·H/C heads where SCP gathers the K, V of all H heads: pure HCP.
  CpChoice c = choose_context_parallel(l, d, 8);
  ASSERT_NE(c.chosen(), nullptr);
  EXPECT_EQ(c.chosen()->c_h, 8);
  EXPECT_EQ(c.chosen()->c_s, 1);
  EXPECT_NE(c.reason.find("pure SCP"), std::string::npos);
  // 95 % sparse: SCP's gathers shrink 20x and beat the all-to-alls.
  l.sparsity = {0.95};
  c = choose_context_parallel(l, d, 8);
  EXPECT_EQ(c.chosen()->c_h, 1);
  EXPECT_EQ(c.chosen()->c_s, 8);
  // Four heads on eight ranks: pure HCP is infeasible. Dense, per layer in units of S·D·bytes,
  // 4x2 moves 3 + 2, 2x4 moves 2 + 6 and 1x8 moves 14: 4x2.
  l.heads = l.kv_heads = 4;
  l.sparsity.clear();
  c = choose_context_parallel(l, d, 8);
  EXPECT_FALSE(c.options.front().feasible);
  EXPECT_NE(c.options.front().infeasible_reason.find("4 query heads"), std::string::npos);
  EXPECT_EQ(c.chosen()->c_h, 4);
  EXPECT_EQ(c.chosen()->c_s, 2);
  const double unit = 65536.0 * 128 * 2;
  EXPECT_NEAR(c.chosen()->hcp_bytes / unit, 3, 1e-12);
  EXPECT_NEAR(c.chosen()->scp_kv_bytes / unit, 2, 1e-12);
  l.heads = l.kv_heads = 1;
  EXPECT_EQ(choose_context_parallel(l, d, 8).chosen()->c_s, 8);
}

TEST(ContextParallel, LinkSpeedDecidesBetweenImbalanceAndTraffic) {
  // One dense head among seven half-sparse ones, eight heads on eight ranks. Pure HCP leaves the
  // dense head's rank 1.78x the mean compute; pure SCP balances compute but moves
  // 4·4.5·(7/8) = 15.75 S·D·bytes against HCP's 7 (per layer).
  CpLayer l;
  l.seq_len = 8192;
  l.heads = l.kv_heads = 8;
  l.sparsity = {0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5};
  CpDevice d;
  d.peak_flops = 1e12;
  d.sparse_efficiency = 1;
  const double unit = 8192.0 * 128 * 2;
  d.intra = {1e15, 0, 0};  // communication is free: balanced compute wins
  CpChoice c = choose_context_parallel(l, d, 8);
  EXPECT_EQ(c.chosen()->c_s, 8);
  EXPECT_NEAR(c.options.back().scp_kv_bytes / unit, 15.75, 1e-12);
  EXPECT_NEAR(c.options.front().hcp_bytes / unit, 7, 1e-12);
  EXPECT_NEAR(c.options.front().max_load / c.options.front().mean_load, 1 / 0.5625, 1e-12);
  d.intra = {1e7, 0, 0};  // a slow link: the fewest bytes win
  c = choose_context_parallel(l, d, 8);
  EXPECT_EQ(c.chosen()->c_h, 8);
}

TEST(ContextParallel, PlacementKeepsAllToAllsInsideANode) {
  // Two 4-device nodes, a slow network: 4x2 with HCP inside a node sends only SCP's gathers
  // across, 4x2 with SCP inside sends two thirds of every all-to-all across.
  CpLayer l;
  l.seq_len = 32768;
  l.heads = l.kv_heads = 8;
  l.sparsity = {0.9};
  CpDevice d;
  d.node_size = 4;
  d.inter = {1e9, 10e-6, 0};
  const CpOption in = cost_cp_option(l, d, 4, 2, CpPlacement::kHcpInner);
  const CpOption out = cost_cp_option(l, d, 4, 2, CpPlacement::kScpInner);
  EXPECT_LT(in.hcp_comm_s, out.hcp_comm_s);
  EXPECT_GT(in.scp_comm_s, out.scp_comm_s);
  EXPECT_LT(in.step_s, out.step_s);
}

TEST(ContextParallel, SizingReturnsTheSmallestSufficientDegree) {
  CpLayer l;
  l.seq_len = 1000;
  l.heads = l.kv_heads = 8;
  l.activation_bytes_per_token = 1e6;  // 1e9 / C bytes per rank
  CpDevice d;
  d.memory_bytes = 0.3e9;
  CpSizing z = size_context_parallel(l, d, {8, 1, 4, 2});
  EXPECT_EQ(z.cp, 4);
  ASSERT_EQ(z.choices.size(), 4u);
  EXPECT_EQ(z.choices[z.chosen].cp, 4);
  EXPECT_FALSE(z.choices[1].chosen()->fits_memory);  // C = 2
  EXPECT_NEAR(z.choices[2].chosen()->memory_bytes, 0.25e9, 1);
  EXPECT_NE(z.reason.find("C = 4 is the smallest"), std::string::npos) << z.reason;
  // Too little memory for any candidate.
  d.memory_bytes = 0.1e9;
  z = size_context_parallel(l, d, {1, 2, 4, 8});
  EXPECT_EQ(z.cp, 0);
  EXPECT_EQ(z.chosen, -1);
  EXPECT_NE(z.reason.find("no candidate up to 8"), std::string::npos) << z.reason;
  // A time target between C = 2 and C = 4.
  d.memory_bytes = 1e12;
  l.seq_len = 65536;
  l.activation_bytes_per_token = 0;
  z = size_context_parallel(l, d, {1, 2, 4, 8});
  const double t2 = z.choices[1].chosen()->step_s, t4 = z.choices[2].chosen()->step_s;
  ASSERT_GT(t2, t4);
  z = size_context_parallel(l, d, {1, 2, 4, 8}, (t2 + t4) / 2);
  EXPECT_EQ(z.cp, 4);
  z = size_context_parallel(l, d, {1, 2, 4, 8}, 1e-9);
  EXPECT_EQ(z.cp, 0);
}

TEST(ContextParallel, BadInputIsAnInputErrorOfOneLine) {
  const CpDevice d;
  auto expect_one_line = [](const std::function<void()>& f) {
    try {
      f();
      ADD_FAILURE() << "no InputError";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  CpLayer l;
  expect_one_line([&] { choose_context_parallel(l, d, 0); });
  expect_one_line([&] { size_context_parallel(l, d, {4, 0}); });
  expect_one_line([&] { size_context_parallel(l, d, {}); });
  expect_one_line([&] { cost_cp_option(l, d, 0, 2, CpPlacement::kHcpInner); });
  expect_one_line([&] { lpt_assign({1, 2}, 0); });
  for (double s : {1.0, -0.1, std::nan("")}) {
    CpLayer bad = l;
    bad.sparsity = {s};
    expect_one_line([&] { choose_context_parallel(bad, d, 2); });
  }
  CpLayer bad = l;
  bad.seq_len = 0;
  expect_one_line([&] { choose_context_parallel(bad, d, 2); });
  bad = l;
  bad.heads = 6;
  bad.kv_heads = 4;
  expect_one_line([&] { choose_context_parallel(bad, d, 2); });
  bad = l;
  bad.sparsity = {0.5, 0.5, 0.5};
  expect_one_line([&] { choose_context_parallel(bad, d, 2); });
  CpDevice slow = d;
  slow.inter.bytes_per_s = 0;
  expect_one_line([&] { choose_context_parallel(l, slow, 2); });
  expect_one_line([] { parse_cp_split("ring"); });
}

TEST(ContextParallel, PlanSection) {
  // With a model: the shape comes from it, the accelerator from the plan.
  core::Config cfg = core::Config::from_string(
      "model: qwen2.5-32b\naccelerator: H100\ncontext_parallel: {seq_len: 262144, sparsity: 0.9}");
  PlanConfig pc = PlanConfig::from_config(cfg);
  cfg.check_all_used();
  ASSERT_TRUE(pc.context_parallel);
  const ContextParallelSpec& s = *pc.context_parallel;
  EXPECT_EQ(s.layer.heads, 40);
  EXPECT_EQ(s.layer.kv_heads, 8);
  EXPECT_EQ(s.layer.head_dim, 128);
  EXPECT_EQ(s.layer.layers, 64);
  EXPECT_EQ(s.layer.sparsity, std::vector<double>{0.9});
  EXPECT_EQ(s.accelerator, "H100");
  EXPECT_DOUBLE_EQ(s.device.inter.bytes_per_s, 50e9);
  EXPECT_DOUBLE_EQ(s.device.memory_bytes, 40e9);
  EXPECT_GT(s.layer.matmul_flops_per_token, 6 * 30e9);

  // Without a model: the shape keys are required, and the plan is about CP alone.
  EXPECT_THROW(PlanConfig::from_config(core::Config::from_string("context_parallel: {}")),
               InputError);
  cfg = core::Config::from_string(
      "context_parallel: {seq_len: 131072, heads: 4, kv_heads: 4, head_dim: 128, layers: 2,\n"
      "  sparsity: [0.9, 0.95, 0.5, 0], candidates: [1, 2, 4, 8], memory_gb: 2}");
  pc = PlanConfig::from_config(cfg);
  cfg.check_all_used();
  const nlohmann::json p = run_plan(pc);
  EXPECT_FALSE(p.contains("scenarios"));
  const auto& cp = p["context_parallel"];
  EXPECT_EQ(cp["heads"].get<int>(), 4);
  EXPECT_NEAR(cp["mean_sparsity"].get<double>(), 0.5875, 1e-12);
  EXPECT_EQ(cp["sizing"]["candidates"].size(), 4u);
  const int chosen = cp["sizing"]["cp"].get<int>();
  EXPECT_GT(chosen, 1);
  const int dense_cp = cp["dense"]["cp"].get<int>();
  if (dense_cp > 0) EXPECT_LE(chosen, dense_cp);  // sparse heads never need more ranks
  const std::string text = format_plan(p);
  EXPECT_NE(text.find("context parallelism for attention at 131072 tokens"), std::string::npos)
      << text;
  EXPECT_NE(text.find("sized: C = "), std::string::npos) << text;
  std::printf("%s", text.c_str());

  // Strict keys and bad values.
  cfg = core::Config::from_string("model: qwen2.5-7b\ncontext_parallel: {seq_lenght: 4096}");
  PlanConfig::from_config(cfg);
  EXPECT_THROW(cfg.check_all_used(), InputError);
  for (const char* bad : {"{sparsity: 1.0}", "{sparsity: [0.5, 0.5]}", "{seq_len: 0}",
                          "{candidates: [0, 2]}", "{split: ring}", "{accelerator: Z80}"}) {
    EXPECT_THROW(PlanConfig::from_config(core::Config::from_string(
                     std::string("model: qwen2.5-7b\ncontext_parallel: ") + bad)),
                 InputError)
        << bad;
  }
}

// The shipped example stays valid and sparsity lets fewer ranks meet its step-time target.
TEST(ContextParallel, ShippedExample) {
  core::Config cfg = core::Config::from_file(std::string(STREAMRL_TEST_DATA_DIR) +
                                             "/../../configs/plan/long_context_cp.yaml");
  const PlanConfig pc = PlanConfig::from_config(cfg);
  cfg.check_all_used();
  const nlohmann::json p = run_plan(pc)["context_parallel"];
  const int sparse = p["sizing"]["cp"].get<int>(), dense = p["dense"]["cp"].get<int>();
  EXPECT_GT(sparse, 0);
  EXPECT_LT(sparse, dense);  // the step-time target needs more ranks all dense
  EXPECT_GT(p["speedup_over_dense"].get<double>(), 1.0);
  std::printf("%s", format_context_parallel(p).c_str());
}

}  // namespace
}  // namespace streamrl::planner
