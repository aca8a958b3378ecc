// Shared parsing of tokenizer.json component specs.
#include "streamrl/tokenizer/spec.h"

#include "streamrl/core/errors.h"

namespace streamrl::tokenizer {

std::string spec_type(const nlohmann::json& spec, std::string_view component,
                      const std::string& source) {
  auto it = spec.find("type");
  if (!spec.is_object() || it == spec.end() || !it->is_string()) {
    throw InputError(std::string(component) + " in " + source + " has no \"type\" string");
  }
  return it->get<std::string>();
}

void throw_unsupported(std::string_view component, std::string_view type, const std::string& source,
                       std::string_view supported) {
  throw InputError("unsupported " + std::string(component) + " type '" + std::string(type) +
                   "' in " + source + " (supported: " + std::string(supported) + ")");
}

std::unique_ptr<Regex> parse_pattern(const nlohmann::json& pattern, const std::string& source) {
  if (pattern.is_object() && pattern.contains("String")) {
    return std::make_unique<Regex>(pattern.at("String").get<std::string>(), true, source);
  }
  if (pattern.is_object() && pattern.contains("Regex")) {
    return std::make_unique<Regex>(pattern.at("Regex").get<std::string>(), false, source);
  }
  throw InputError("pattern in " + source + " must be {\"String\": ...} or {\"Regex\": ...}, got " +
                   pattern.dump());
}

}  // namespace streamrl::tokenizer
