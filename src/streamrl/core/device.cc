#include "streamrl/core/device.h"

#include "streamrl/core/errors.h"

namespace streamrl::core {

torch::Device parse_device(const std::string& text, const std::string& what) {
  const bool cuda = text == "cuda" || text.starts_with("cuda:");
  if (text != "cpu" && text != "cpu:0" && !cuda) {
    throw InputError(what + ": '" + text + "' is not a device (cpu, cuda or cuda:N)");
  }
  if (!cuda) return torch::Device(torch::kCPU);  // "cpu:0" names the same, one CPU device
  int index = 0;
  if (text.starts_with("cuda:")) {
    const std::string n = text.substr(5);
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || n.size() > 3) {
      throw InputError(what + ": '" + text + "' is not a device (cpu, cuda or cuda:N)");
    }
    index = std::stoi(n);
  }
  const int64_t count = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  if (index >= count) {
    throw InputError(what + ": '" + text + "' asked for, but " +
                     (count == 0 ? std::string("no CUDA device is visible (a CPU-only libtorch, "
                                               "or no GPU on this machine)")
                                 : std::to_string(count) + " CUDA device(s) are visible"));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void check_dtype_name(const std::string& dtype, const std::string& what) {
  if (dtype != "auto" && dtype != "float32" && dtype != "bfloat16") {
    throw InputError(what + ": '" + dtype + "' is not a dtype (auto, float32 or bfloat16)");
  }
}

torch::ScalarType compute_dtype(const std::string& dtype, const torch::Device& device,
                                const std::string& what) {
  check_dtype_name(dtype, what);
  if (device.is_cpu() || dtype == "float32") return torch::kFloat32;
  return torch::kBFloat16;
}

void synchronize(const torch::Device& device) {
  // A device's work is asynchronous: reading one element waits for it.
  if (!device.is_cpu()) torch::zeros({1}, torch::TensorOptions().device(device)).cpu();
}

}  // namespace streamrl::core
