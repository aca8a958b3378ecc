#include "streamrl/model/precision.h"

#include <ATen/autocast_mode.h>

namespace streamrl::model {
namespace {

// libtorch 2.4 keyed autocast by device type; 1.13 had one switch and one dtype for CUDA.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool cuda_autocast_on() { return at::autocast::is_autocast_enabled(at::kCUDA); }
void set_cuda_autocast_dtype(torch::ScalarType dtype) {
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
}
void set_cuda_autocast(bool on) { at::autocast::set_autocast_enabled(at::kCUDA, on); }
#else
bool cuda_autocast_on() { return at::autocast::is_enabled(); }
void set_cuda_autocast_dtype(torch::ScalarType dtype) {
  at::autocast::set_autocast_gpu_dtype(dtype);
}
void set_cuda_autocast(bool on) { at::autocast::set_enabled(on); }
#endif

}  // namespace

AutocastGuard::AutocastGuard(const torch::Device& device, torch::ScalarType dtype) {
  if (!device.is_cuda() || dtype == torch::kFloat32 || cuda_autocast_on()) return;
  set_cuda_autocast_dtype(dtype);
  set_cuda_autocast(true);
  at::autocast::increment_nesting();
  active_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // The cast weights are cached for the guard's lifetime; drop them with it.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_cuda_autocast(false);
}

}  // namespace streamrl::model
