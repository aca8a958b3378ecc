#include "streamrl/planner/link_sim.h"

#include <gtest/gtest.h>

#include <utility>

#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

// Four MoE layers whose 8 MB all-to-alls meet the gradients on a 1 GB/s link; the compute about
// as long as the communication, as in the paper's models.
std::vector<BackwardLayer> moe_backward(int64_t gradient_bytes = 8 << 20, double compute_s = 0.02) {
  BackwardLayer l;
  l.moe = true;
  l.compute_s = compute_s, l.gradient_bytes = gradient_bytes;
  l.combine_s = 0.002, l.tokens = 4096, l.bytes_per_token = 2048;
  l.expert_s = 0.015, l.expert_gradient_bytes = gradient_bytes / 2;
  return std::vector<BackwardLayer>(4, l);
}

LinkSimResult run(ep::Policy policy, std::vector<BackwardLayer> layers = moe_backward()) {
  return simulate_backward(layers, Link{1e9, 20e-6}, {policy, 1 << 20, 1024});
}

TEST(LinkSim, AnIdleLinkGivesTheIdealAllToAll) {
  BackwardLayer l = moe_backward()[0];
  l.gradient_bytes = l.expert_gradient_bytes = 0;
  for (ep::Policy p : {ep::Policy::kFairShare, ep::Policy::kPartitioned}) {
    const LinkSimResult r = simulate_backward({l}, Link{1e9, 0}, {p, 1 << 20, 1024});
    EXPECT_NEAR(r.all_to_all_s, 2 * 4096 * 2048 / 1e9, 1e-9);
    EXPECT_NEAR(r.all_to_all_s, r.all_to_all_alone_s, 1e-9);
    if (p == ep::Policy::kFairShare) {
      EXPECT_NEAR(r.backward_s, 0.037 + r.all_to_all_s, 1e-9);
      EXPECT_NEAR(r.all_to_all_blocked_s, r.all_to_all_s, 1e-9);
    } else {  // Lina pipelines the expert FFN with the chunks: part of it hides the exchange
      EXPECT_LT(r.backward_s, 0.037 + r.all_to_all_s - 0.005);
      EXPECT_NEAR(r.backward_s, 0.037 + r.all_to_all_blocked_s, 1e-9);
    }
  }
}

TEST(LinkSim, LinaShortensTheAllToAllsAndTheStep) {
  const LinkSimResult fair = run(ep::Policy::kFairShare);
  const LinkSimResult prio = run(ep::Policy::kPriority);
  const LinkSimResult lina = run(ep::Policy::kPartitioned);
  // The same bytes cross the link either way; what changes is who waits.
  EXPECT_GT(fair.all_to_all_s, 1.3 * lina.all_to_all_s);
  EXPECT_LE(lina.all_to_all_s, prio.all_to_all_s + 1e-12);
  EXPECT_LT(lina.compute_end_s, fair.compute_end_s);
  EXPECT_LE(lina.backward_s, fair.backward_s + 1e-12);
  EXPECT_GE(lina.all_to_all_s, lina.all_to_all_alone_s - 1e-12);
}

TEST(LinkSim, OnASaturatedLinkLinaCostsLittle) {
  // Gradients five times the compute's length: holding all-reduce during the combines leaves
  // the link idle for a moment and chunks add launch latency, but the all-to-alls still win.
  const auto layers = moe_backward(80 << 20, 0.002);
  const LinkSimResult fair = run(ep::Policy::kFairShare, layers);
  const LinkSimResult lina = run(ep::Policy::kPartitioned, layers);
  EXPECT_LT(lina.all_to_all_s, fair.all_to_all_s);
  EXPECT_LT(lina.backward_s, 1.05 * fair.backward_s);
}

// Two dense layers of 1 s compute, each followed by a 0.5 s gradient all-reduce: the second
// compute overlaps the first all-reduce fully when communication takes no compute, not at all
// when it takes all of it (Gloo on the CPU that computes), and halfway at 0.5.
TEST(LinkSim, CommunicationThatTakesComputeSlowsIt) {
  BackwardLayer l;
  l.compute_s = 1.0, l.gradient_bytes = 500;
  for (const auto& [share, expect] : {std::pair{0.0, 2.5}, {1.0, 3.0}, {0.5, 2.75}}) {
    const LinkSimResult r =
        simulate_backward({l, l}, Link{1000, 0, share}, {ep::Policy::kFairShare, 1 << 20, 1});
    EXPECT_NEAR(r.backward_s, expect, 1e-9) << share;
  }
  EXPECT_THROW(simulate_backward({l}, Link{1000, 0, 1.5}, {}), InputError);
}

}  // namespace
}  // namespace streamrl::planner
