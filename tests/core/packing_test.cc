#include "streamrl/core/packing.h"

#include <gtest/gtest.h>

namespace streamrl::core {
namespace {

using Packs = std::vector<std::vector<size_t>>;

TEST(PaddedTokens, RowsTimesLongestOfEachPack) {
  const std::vector<int64_t> lengths = {100, 10, 50, 100, 100};
  EXPECT_EQ(padded_tokens(lengths, Packs{{0, 3, 4}, {2, 1}}), 3 * 100 + 2 * 50);
  EXPECT_EQ(padded_tokens(lengths, pack_by_token_budget(lengths, 300)), 300 + 100);
}

TEST(PackEager, RunsEveryPackWhenNoMoreSamplesAreComing) {
  const std::vector<int64_t> lengths = {100, 10, 50, 100, 100};
  const EagerPacks p = pack_eager(lengths, 300, /*more_coming=*/false);
  EXPECT_EQ(p.run, pack_by_token_budget(lengths, 300));
  EXPECT_EQ(p.run, (Packs{{0, 3, 4}, {2, 1}}));
  EXPECT_TRUE(p.keep.empty());
}

TEST(PackEager, PartlyFilledPackWaits) {
  // [100, 100, 100] fills the budget; [50, 10] has room for another row of 50.
  const EagerPacks p = pack_eager({100, 10, 50, 100, 100}, 300, /*more_coming=*/true);
  EXPECT_EQ(p.run, (Packs{{0, 3, 4}}));
  EXPECT_EQ(p.keep, (std::vector<size_t>{2, 1}));
}

TEST(PackEager, MostlyPaddedPackWaitsUntilTheLastSamples) {
  // Full (no room for a fourth row of 100) but 200 real of 300 padded tokens, under kMinPackFill.
  EagerPacks p = pack_eager({50, 100, 50}, 300, /*more_coming=*/true);
  EXPECT_TRUE(p.run.empty());
  EXPECT_EQ(p.keep, (std::vector<size_t>{1, 0, 2}));
  p = pack_eager({50, 100, 50}, 300, /*more_coming=*/false);
  EXPECT_EQ(p.run, (Packs{{1, 0, 2}}));
  EXPECT_TRUE(p.keep.empty());
}

TEST(PackEager, PackAtExactlyTheMinimumFillRuns) {
  // 240 real of 300 padded tokens: kMinPackFill exactly.
  const EagerPacks p = pack_eager({70, 100, 70}, 300, /*more_coming=*/true);
  EXPECT_EQ(p.run, (Packs{{1, 0, 2}}));
  EXPECT_TRUE(p.keep.empty());
}

TEST(PackEager, ItemOverTheBudgetRunsAlone) {
  const EagerPacks p = pack_eager({500, 90, 100}, 300, /*more_coming=*/true);
  EXPECT_EQ(p.run, (Packs{{0}}));
  EXPECT_EQ(p.keep, (std::vector<size_t>{2, 1}));  // 190 real in room for a third row
}

}  // namespace
}  // namespace streamrl::core
