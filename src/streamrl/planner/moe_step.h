// An expert-parallel MoE training step at cluster scale, for Lina's link simulation: the model's
// shape, the accelerator, the link and the batch give each layer's backward compute and
// communication (planner::BackwardLayer), and the step under each scheduling policy.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "streamrl/ep/comm_scheduler.h"
#include "streamrl/planner/hardware.h"
#include "streamrl/planner/link_sim.h"

namespace streamrl::core {
class Config;
}

namespace streamrl::planner {

// Defaults: the Lina paper's GPT-2 MoE (12 layers, every FFN an MoE of 16 experts, top-2) on its
// testbed of 16 A100s with 100 Gb/s per device, one expert per device.
struct MoeStepSpec {
  std::string name = "GPT-2 MoE";
  int layers = 12, hidden = 768, ffn = 3072, experts = 16, top_k = 2, seq = 1024;
  int devices = 16;                  // data parallel over all of them; experts spread over them
  int64_t tokens_per_device = 8192;  // per step
  Accelerator accelerator = find_accelerator("A100");
  double mfu = 0.4;                 // of the accelerator's peak, for every matmul
  double bytes_per_activation = 2;  // fp16 tokens in the all-to-alls
  double bytes_per_gradient = 2;    // fp16 gradients in the all-reduce
  Link link;
  int64_t all_reduce_chunk_bytes = 30 << 20;  // Lina's defaults
  int64_t all_to_all_chunk_tokens = 512;

  // Reads the keys above from a `lina` plan section (accelerator by name, link_gb_s,
  // op_latency_us); InputError for bad values.
  static MoeStepSpec from_config(const core::Config& section);
};

// Each layer's backward (last layer first), for simulate_backward.
std::vector<BackwardLayer> moe_backward_layers(const MoeStepSpec& spec);
// The forward pass: its compute and its two all-to-alls per layer on an otherwise idle link.
double moe_forward_seconds(const MoeStepSpec& spec);

// The step under fair sharing (DeepSpeed-MoE's uncoordinated streams), strict priority and
// Lina's partitioned priority, with `train_speedup` and `a2a_speedup` of Lina over fair sharing.
nlohmann::json project_lina(const MoeStepSpec& spec);

}  // namespace streamrl::planner
