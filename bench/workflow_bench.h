// `bench workflow`: the same multi-turn, tool-using rollouts (the calc task from its SFT
// checkpoint, greedy) run the way agent frameworks often do and the way streamrl does: module-level
// (every turn a fresh request that prefills the whole conversation, turns in lock-step), with the
// KV cache kept across turns, and with each rollout continuing the moment its tool returns.
#pragma once

#include "registry.h"

namespace streamrl::bench {

nlohmann::json run_workflow_bench(const BenchOptions& options);

}  // namespace streamrl::bench
