// SwiGLU's activation, silu(gate) * up, in one pass over a fused gate/up projection.
#pragma once

#include <torch/torch.h>

namespace streamrl::model {

// gate_up [..., 2I] (gate in the first I columns, up in the last I) -> [..., I]. A CPU float32
// kernel (one read, one write, no temporaries); other devices and dtypes: silu then multiply.
// Not differentiable.
torch::Tensor swiglu(const torch::Tensor& gate_up);

}  // namespace streamrl::model
