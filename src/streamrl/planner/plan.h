// `streamrl plan --config FILE`: the planner's predictions for one cluster and model
// (configs/plan/): Algorithm 1's allocation, emulated throughput per mode, the elastic schedule for
// growing output lengths, the cost-effectiveness of a heterogeneous cross-datacenter set-up and
// Lina's effect on an expert-parallel MoE step and the context-parallel degree for long-context
// training, each next to the paper's figure where one exists.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "streamrl/planner/context_parallel.h"
#include "streamrl/planner/cost_model.h"
#include "streamrl/planner/emulator.h"
#include "streamrl/planner/hardware.h"
#include "streamrl/planner/model_shape.h"
#include "streamrl/planner/moe_step.h"
#include "streamrl/planner/workload.h"

namespace streamrl::core {
class Config;
}

namespace streamrl::planner {

struct PlanConfig {
  ModelShape shape;                        // `model`: a preset name or a path to a HF config.json
  Accelerator accelerator;                 // `accelerator` (H800)
  int devices = 32;                        // `devices`
  int unit = 8;                            // `unit`: allocation granularity (one 8-device node)
  std::vector<int> max_outputs = {20000};  // `max_output`: one scenario each
  BatchSpec batch;                         // `workload.*`
  double flops_per_param_token = 18;       // `training.flops_per_param_token` (PPO: 18)
  Efficiency efficiency;                   // `efficiency.*`
  int iterations = 4;                      // `emulator.iterations`
  uint64_t seed = 0;                       // `emulator.seed`
  double long_tail_fraction = 0.2;         // `emulator.long_tail_fraction`
  Dispatch baseline_dispatch = Dispatch::kRandom;     // colocate, disagg
  Dispatch streamrl_dispatch = Dispatch::kSkewAware;  // stream, async
  std::string trace_path;          // `emulator.trace`: Chrome trace of the first scenario
  Mode trace_mode = Mode::kAsync;  // `emulator.trace_mode`

  // `measured`: this machine instead of the catalogue, devices are cores. Each SGS instance is one
  // core with the PTL(BS) table of `streamrl profile --threads 1 --out FILE` (`measured.profile`);
  // the trainer runs `measured.train_tokens_per_s` per core (e.g. the `bench emulator` input)
  // times cores^(`train_scaling` - 1): 1 = linear.
  struct Measured {
    bool enabled = false;
    PtlTable table;
    double train_tokens_per_s = 0;
    double train_scaling = 1.0;
    double optimizer_step_s = 0;
    int max_batch = 128;
    int64_t micro_batch_tokens = 8192;
    double copy_gb_s = 5;  // in-process weight copy
  } measured;

  struct Elastic {
    bool enabled = false;
    int iterations = 23;
    int start_max_output = 10000, end_max_output = 20000;
    int unit = 8;
    double min_gain_fraction = 0.02;  // smallest worthwhile gain of one unit, of T_gen
  } elastic;

  struct Heterogeneous {
    bool enabled = false;
    std::string gen_accelerator = "H20";
    int gen_devices = 32;
    std::string train_accelerator = "H800";
    int train_devices = 16;
    double link_gb_s = 10;  // 80 Gbps between the datacenters
    int baseline_devices = 32;
    Mode mode = Mode::kAsync;
  } heterogeneous;

  // `lina`: an expert-parallel MoE step whose all-to-alls and gradient all-reduces share the
  // link, under fair sharing, strict priority and Lina's scheduling. A plan with `lina` and no
  // `model` is about that alone (configs/plan/lina_16xa100.yaml).
  std::optional<MoeStepSpec> lina;

  // `context_parallel`: sizing sparsity-aware context parallelism (DSV's HCP x SCP hybrid) for
  // long-context training of `model`; with no `model`, its shape keys are required and the plan
  // is about that alone.
  std::optional<ContextParallelSpec> context_parallel;

  // Reads the keys named above; unknown keys and bad values are InputErrors.
  static PlanConfig from_config(const core::Config& config);
};

nlohmann::json run_plan(const PlanConfig& config);

// The plan as aligned text tables.
std::string format_plan(const nlohmann::json& plan);

}  // namespace streamrl::planner
