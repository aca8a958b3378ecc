// `lookup`: a key-value store a task ships (e.g. constants a problem refers to by name).
#pragma once

#include <map>
#include <string>

#include "streamrl/tools/tool.h"

namespace streamrl::tools {

class LookupTool : public Tool {
 public:
  explicit LookupTool(std::map<std::string, std::string> table) : table_(std::move(table)) {}
  std::string name() const override { return "lookup"; }
  nlohmann::json schema() const override;
  // arguments: {"key": "..."}; an unknown key is an InputError naming it.
  std::string run(const nlohmann::json& arguments) const override;

 private:
  std::map<std::string, std::string> table_;
};

}  // namespace streamrl::tools
