// Helpers for reading the component specs of a tokenizer.json ({"type": ..., ...} objects) with
// one-line InputErrors that name the file. Internal to tokenizer/.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "streamrl/tokenizer/regex.h"

namespace streamrl::tokenizer {

// The "type" string of `spec`, the value of the key `component` ("normalizer", "decoder", ...).
std::string spec_type(const nlohmann::json& spec, std::string_view component,
                      const std::string& source);

[[noreturn]] void throw_unsupported(std::string_view component, std::string_view type,
                                    const std::string& source, std::string_view supported);

// A {"String": literal} or {"Regex": pattern} value, as Split and Replace use.
std::unique_ptr<Regex> parse_pattern(const nlohmann::json& pattern, const std::string& source);

// `spec[key]` as T, or `fallback` when the key is absent or null.
template <typename T>
T value_or(const nlohmann::json& spec, const char* key, T fallback) {
  auto it = spec.find(key);
  return it == spec.end() || it->is_null() ? fallback : it->get<T>();
}

}  // namespace streamrl::tokenizer
