// The adaptive-gating curriculum: cosine similarity to the simplest sequence's two-expert profile
// orders sequences (most similar first, ties by the smaller share), unobserved ones last; and a
// sequence's profile read from the engine's recorded routing.
#include <gtest/gtest.h>

#include "streamrl/rl/moe_curriculum.h"

namespace streamrl::rl {
namespace {

TEST(CurriculumOrder, MostSimilarToTheSimplestSequenceFirst) {
  const std::vector<RoutingProfile> profiles = {
      {0.75, 0.5},  // cos 0.83 to the anchor
      {0.25, 0.0},  // the anchor: the fewest two-expert tokens
      {},           // never observed
      {0.5, 0.0},   // same direction as the anchor, more two-expert tokens
      {0.0, 0.5},   // orthogonal
      {0.5, 0.5},   // cos 0.71
  };
  EXPECT_EQ(curriculum_order(profiles), (std::vector<size_t>{1, 3, 0, 5, 4, 2}));
}

TEST(CurriculumOrder, AllTopOneAnchorOrdersBySharesAndEmptyInputIsEmpty) {
  EXPECT_EQ(curriculum_order({{0.5, 0.5}, {0.0, 0.0}, {0.25, 0.0}}),
            (std::vector<size_t>{1, 2, 0}));
  EXPECT_TRUE(curriculum_order({}).empty());
  EXPECT_EQ(curriculum_order({{}, {}}), (std::vector<size_t>{0, 1}));
}

TEST(EngineRoutingProfile, SharesOfPositionsWithASecondExpertPerLayer) {
  engine::Sample s;
  s.routing_layers = 2;
  s.routing_k = 2;
  // [position][layer][slot]
  s.routed_experts = {3, -1, 1, 4,   // position 0: layer 0 one expert, layer 1 two
                      2, 5,  0, -1,  // position 1
                      1, -1, 6, 7};  // position 2
  const RoutingProfile p = engine_routing_profile(s);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_DOUBLE_EQ(p[0], 1.0 / 3);
  EXPECT_DOUBLE_EQ(p[1], 2.0 / 3);
  EXPECT_TRUE(engine_routing_profile(engine::Sample{}).empty());
}

}  // namespace
}  // namespace streamrl::rl
