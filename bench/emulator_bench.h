// `streamrl bench emulator`: the step emulator's predicted iteration time per mode against the
// measured one of `streamrl bench rl_modes --json` (issue #8; goal: within 15%). The measured JSON
// comes from the file named by STREAMRL_RL_MODES_JSON; the emulator's inputs (PTL(BS), prefill and
// training speed at each role's core budget, weight copy time) are measured here, in this run, on
// the checkpoint's architecture (STREAMRL_EMULATOR_CKPT, else the run's checkpoint, else
// runs/sft_sum/final, else configs/model/tiny.json).
#pragma once

#include "registry.h"

namespace streamrl::bench {

nlohmann::json run_emulator_bench(const BenchOptions& options);

}  // namespace streamrl::bench
