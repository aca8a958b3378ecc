#include "streamrl/tools/lookup_tool.h"

#include "streamrl/core/errors.h"

namespace streamrl::tools {

nlohmann::json LookupTool::schema() const {
  return {{"type", "function"},
          {"function",
           {{"name", "lookup"},
            {"description", "The value stored under a key."},
            {"parameters",
             {{"type", "object"},
              {"properties", {{"key", {{"type", "string"}}}}},
              {"required", {"key"}}}}}}};
}

std::string LookupTool::run(const nlohmann::json& arguments) const {
  if (!arguments.is_object() || !arguments.contains("key") || !arguments["key"].is_string()) {
    throw InputError("lookup needs {\"key\": string}");
  }
  const std::string key = arguments["key"].get<std::string>();
  auto it = table_.find(key);
  if (it == table_.end()) throw InputError("no key '" + key + "'");
  return it->second;
}

}  // namespace streamrl::tools
