#include "streamrl/model/fused_linear.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <dlfcn.h>

#include <atomic>

namespace streamrl::model {
namespace {

// libtorch's XNNPACK linear (the `prepacked` operators its mobile path uses), called boxed: the
// context is a TorchScript custom class whose C++ type libtorch does not install a header for.
// XNNPACK runs on libtorch's pthreadpool, whose threads spin beside the OpenMP ones of the
// neighbouring ops: with 2 threads on 2 cores a decode step at batch 64 ran 7x slower. So it runs
// on the calling thread, through caffe2::_NoPThreadPoolGuard (exported, but its header is not
// installed: found by name, and without it no packing). A GEMM this small is fastest on one core.
struct PackedOps {
  c10::OperatorHandle prepack, run;
  bool (*pool_guard_enabled)();
  void (*set_pool_guard)(bool);
};

const PackedOps* packed_ops() {
  static const PackedOps* ops = []() -> const PackedOps* {
    if (!at::globalContext().isXNNPACKAvailable()) return nullptr;
    auto& d = c10::Dispatcher::singleton();
    auto prepack = d.findOp({"prepacked::linear_clamp_prepack", ""});
    auto run = d.findOp({"prepacked::linear_clamp_run", ""});
    void* is_enabled = dlsym(RTLD_DEFAULT, "_ZN6caffe219_NoPThreadPoolGuard10is_enabledEv");
    void* set_enabled = dlsym(RTLD_DEFAULT, "_ZN6caffe219_NoPThreadPoolGuard11set_enabledEb");
    if (!prepack || !run || !is_enabled || !set_enabled) return nullptr;
    return new PackedOps{*prepack, *run, reinterpret_cast<bool (*)()>(is_enabled),
                         reinterpret_cast<void (*)(bool)>(set_enabled)};
  }();
  return ops;
}

// Runs the packed GEMM on this thread (see PackedOps), the pool guard restored however it ends.
torch::Tensor run_packed(const PackedOps& ops, const torch::Tensor& x2d, c10::IValue packed) {
  struct OnThisThread {
    const PackedOps& ops;
    const bool was = ops.pool_guard_enabled();
    explicit OnThisThread(const PackedOps& o) : ops(o) { ops.set_pool_guard(true); }
    ~OnThisThread() { ops.set_pool_guard(was); }
  } guard(ops);
  torch::jit::Stack stack{x2d, std::move(packed)};
  ops.run.callBoxed(&stack);
  return stack[0].toTensor();
}

std::atomic<bool> packing{true};

bool packable(const torch::Tensor& t) { return t.is_cpu() && t.scalar_type() == torch::kFloat32; }

}  // namespace

bool FusedLinear::packs_weights() { return packing && packed_ops() != nullptr; }

void FusedLinear::set_packing(bool on) { packing = on; }

torch::Tensor FusedLinear::forward(const torch::Tensor& x) {
  std::vector<std::pair<const void*, uint32_t>> key;
  bool any_bias = false;
  for (const auto& p : parts_) {
    key.emplace_back(p->weight.data_ptr(), p->weight._version());
    if (p->bias.defined()) {
      key.emplace_back(p->bias.data_ptr(), p->bias._version());
      any_bias = true;
    }
  }
  torch::Tensor weight, bias;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (key != key_ || !weight_.defined()) {
      torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> ws, bs;
      for (const auto& p : parts_) {
        ws.push_back(p->weight.detach());
        if (any_bias) {
          bs.push_back(p->bias.defined() ? p->bias.detach()
                                         : torch::zeros({p->weight.size(0)}, p->weight.options()));
        }
      }
      weight_ = ws.size() == 1 ? ws[0] : torch::cat(ws, 0);
      bias_ = !any_bias ? torch::Tensor() : bs.size() == 1 ? bs[0] : torch::cat(bs, 0);
      packed_ = c10::IValue();
      if (const PackedOps* ops = packed_ops(); ops && packable(weight_)) {
        torch::jit::Stack stack{weight_.contiguous(),
                                bias_.defined() ? c10::IValue(bias_.contiguous()) : c10::IValue(),
                                c10::IValue(), c10::IValue()};
        ops->prepack.callBoxed(&stack);
        packed_ = std::move(stack[0]);
      }
      key_ = std::move(key);
    }
    if (packing && !packed_.isNone() && packable(x) && x.numel() > 0) {
      // Under the lock: XNNPACK sets its operator up with each call's pointers, so two threads
      // running one packed layer at once (two engines on one model) would race.
      const int64_t in = x.size(-1);
      std::vector<int64_t> out_shape = x.sizes().vec();
      out_shape.back() = weight_.size(0);
      return run_packed(*packed_ops(), x.reshape({-1, in}).contiguous(), packed_).view(out_shape);
    }
    weight = weight_;
    bias = bias_;
  }
  return torch::linear(x, weight, bias);
}

}  // namespace streamrl::model
