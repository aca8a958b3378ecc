// Accelerator catalogue for the planner: published peak figures and relative
// prices, plus the efficiency factors that turn peaks into achieved decode and training speed.
#pragma once

#include <string>
#include <vector>

namespace streamrl::planner {

struct Accelerator {
  std::string name;
  double bf16_tflops = 0;   // dense BF16 peak
  double hbm_gb = 0;        // memory capacity
  double hbm_tb_s = 0;      // memory bandwidth
  double nvlink_gb_s = 0;   // intra-node interconnect
  double network_gb_s = 0;  // scale-out bandwidth per device (bytes), for weight transfer
  double price = 0;         // relative cost per device (H20 = 1)
};

// Fractions of peak that real kernels reach. The decode factors reproduce the paper's PTL(BS)
// profile of Qwen2.5-7B on one H800 (Fig. 6; see planner_test). The training MFU is fitted to one
// number: Fig. 10's even split of 64 H800 for 32B at 20K, where training takes 0.73 of the
// generation time (0.27 gives 0.70; a PPO trainer with critic, long sequences and CPU offloading
// runs well below the 0.4-0.5 of plain pre-training).
struct Efficiency {
  double decode_bandwidth = 0.8;     // weight and KV-cache reads
  double decode_compute = 0.5;       // per-token matmuls at large batch
  double layer_overhead_ms = 0.093;  // kernel launches and small ops per layer per decode step
  double tp_allreduce_ms = 0.03;     // per all-reduce (two per layer) when TP > 1
  double train_mfu = 0.27;           // model FLOP utilisation of the trainer
};

// H800, H20 (Table 1 of the paper, prices 2.85 : 1 per machine), H100 and A100 (public data
// sheets; their prices are assumptions: H100 as H800, A100 at 1.6).
const std::vector<Accelerator>& accelerator_catalogue();

// Case-insensitive lookup; InputError listing the known names otherwise.
const Accelerator& find_accelerator(const std::string& name);

}  // namespace streamrl::planner
