#include "streamrl/tools/builtin_tools.h"

#include <memory>

#include "streamrl/core/errors.h"
#include "streamrl/tools/calc_tool.h"

namespace streamrl::tools {

ToolRunner builtin_tool_runner(const std::vector<std::string>& names, const ToolLimits& limits) {
  ToolRunner runner(limits);
  for (const std::string& name : names) {
    if (name == "calc") {
      runner.add(std::make_shared<CalcTool>());
    } else {
      throw InputError("unknown built-in tool '" + name + "' (known: calc)");
    }
  }
  return runner;
}

}  // namespace streamrl::tools
