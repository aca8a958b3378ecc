// Where a role's tensors live and in which precision it computes: `run.device`, `sgs.devices`,
// `model.dtype` and the commands' `--device` (docs/gpu.md). The CPU is the default everywhere.
#pragma once

#include <torch/torch.h>

#include <string>

namespace streamrl::core {

// "cpu" (or "cpu:0"), "cuda" (= "cuda:0") or "cuda:N" -> a device. InputError naming `what` (the
// config key or flag) for anything else, and for a CUDA device this libtorch or this machine does
// not have.
torch::Device parse_device(const std::string& text, const std::string& what = "device");

// `model.dtype`: "auto" (bfloat16 on CUDA, float32 on the CPU), "float32" or "bfloat16". The CPU
// always computes in float32 (its decode kernel and BLAS are fp32). InputError for other names.
torch::ScalarType compute_dtype(const std::string& dtype, const torch::Device& device,
                                const std::string& what = "model.dtype");

// Checks a `model.dtype` name without a device (config validation). InputError when unknown.
void check_dtype_name(const std::string& dtype, const std::string& what = "model.dtype");

// Waits for the work queued on `device` (a no-op on the CPU, whose work is synchronous): timers
// around device work call it on both sides.
void synchronize(const torch::Device& device);

}  // namespace streamrl::core
