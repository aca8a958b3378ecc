// The unbiased pass@k estimator against its defining formula 1 - C(n-c, k) / C(n, k).
#include <gtest/gtest.h>

#include <cmath>

#include "streamrl/rl/evaluate.h"

namespace streamrl::rl {
namespace {

// C(n, k) by the multiplicative formula, exact in double for the small n used here.
double binomial(int n, int k) {
  if (k < 0 || k > n) return 0;
  double b = 1;
  for (int i = 1; i <= k; ++i) b = b * (n - k + i) / i;
  return b;
}

TEST(PassAtK, MatchesTheBinomialFormula) {
  for (int n = 1; n <= 20; ++n) {
    for (int c = 0; c <= n; ++c) {
      for (int k = 1; k <= n; ++k) {
        const double reference = 1.0 - binomial(n - c, k) / binomial(n, k);
        EXPECT_NEAR(pass_at_k(n, c, k), reference, 1e-12) << n << " " << c << " " << k;
      }
    }
  }
}

TEST(PassAtK, EdgeCasesAndLargeN) {
  EXPECT_EQ(pass_at_k(8, 0, 1), 0.0);
  EXPECT_EQ(pass_at_k(8, 8, 8), 1.0);
  EXPECT_DOUBLE_EQ(pass_at_k(8, 3, 1), 3.0 / 8.0);  // pass@1 is the fraction correct
  EXPECT_EQ(pass_at_k(8, 1, 8), 1.0);               // any correct sample among all n
  // C(1000, 500) overflows no double here: 1 - C(990, 500) / C(1000, 500) by log-gamma.
  const double log_ratio =
      std::lgamma(991) - std::lgamma(491) - std::lgamma(1001) + std::lgamma(501);
  const double value = pass_at_k(1000, 10, 500);
  EXPECT_TRUE(std::isfinite(value));
  EXPECT_NEAR(value, 1.0 - std::exp(log_ratio), 1e-9);
}

}  // namespace
}  // namespace streamrl::rl
