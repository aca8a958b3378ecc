// run.device / --device and model.dtype parsing (core/device.h).
#include "streamrl/core/device.h"

#include <gtest/gtest.h>

#include "streamrl/core/errors.h"

namespace streamrl::core {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_device(text, "run.device");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Device, ParsesTheCpuAndRejectsOtherNamesNamingTheKey) {
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_TRUE(parse_device("cpu:0").is_cpu());
  for (const char* bad : {"", "gpu", "CPU", "cuda:", "cuda:x", "cuda:-1", "cuda:1:2", "cpu:1"}) {
    const std::string e = error_of(bad);
    EXPECT_NE(e.find("run.device"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("cpu, cuda or cuda:N"), std::string::npos) << bad << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << bad;
  }
}

TEST(Device, AMissingGpuIsAnInputErrorNotACrash) {
  const int64_t visible = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  const std::string e = error_of("cuda:" + std::to_string(visible));
  EXPECT_NE(e.find("run.device"), std::string::npos) << e;
  if (visible == 0) {
    EXPECT_NE(e.find("no CUDA device is visible"), std::string::npos) << e;
    EXPECT_NE(error_of("cuda"), "");
  }
}

TEST(Device, DtypeIsFp32OnTheCpuAndBf16ByDefaultOnCuda) {
  const torch::Device cpu(torch::kCPU), gpu(torch::kCUDA, 0);  // constructing needs no GPU
  for (const char* d : {"auto", "float32", "bfloat16"}) {
    EXPECT_EQ(compute_dtype(d, cpu), torch::kFloat32) << d;
  }
  EXPECT_EQ(compute_dtype("auto", gpu), torch::kBFloat16);
  EXPECT_EQ(compute_dtype("bfloat16", gpu), torch::kBFloat16);
  EXPECT_EQ(compute_dtype("float32", gpu), torch::kFloat32);
  EXPECT_THROW(compute_dtype("fp16", gpu), InputError);
  EXPECT_THROW(check_dtype_name("half"), InputError);
}

}  // namespace
}  // namespace streamrl::core
