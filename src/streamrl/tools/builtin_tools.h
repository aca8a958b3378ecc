// The runner a task's tool names ask for, with the built-in tools behind them.
#pragma once

#include <string>
#include <vector>

#include "streamrl/tools/tool.h"

namespace streamrl::tools {

// A runner with the built-in tools of `names` ("calc"); InputError for an unknown name (lookup
// needs its table, so a task that uses it builds its runner itself).
ToolRunner builtin_tool_runner(const std::vector<std::string>& names,
                               const ToolLimits& limits = {});

}  // namespace streamrl::tools
