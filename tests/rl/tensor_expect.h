// Values and checks the RL formula tests share.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <vector>

namespace streamrl::rl {

inline const torch::TensorOptions kF64 = torch::TensorOptions().dtype(torch::kDouble);
inline constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// `got`, flattened, element by element against `want`.
inline void expect_all_near(const torch::Tensor& got, const std::vector<double>& want, double tol) {
  const torch::Tensor flat = got.reshape({-1});
  ASSERT_EQ(flat.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(flat[i].item<double>(), want[i], tol) << "index " << i;
  }
}

}  // namespace streamrl::rl
