// Strict YAML configuration with Hydra-style `key.sub=value` overrides.
//
// Components read their own section with `get(key, field)`: a present key overrides the field's
// default, an absent key keeps it, and either way the value lands in the resolved config that the
// run directory records. After all components have read, `check_all_used()` rejects every key
// nobody asked for, so a typo is an error instead of a silently ignored setting.
#pragma once

#include <yaml-cpp/yaml.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "streamrl/core/errors.h"

namespace streamrl::core {

class Config {
 public:
  // Parses YAML text (may be empty) and applies overrides "a.b=value" (value parsed as YAML).
  // Throws InputError on malformed YAML or an override without '='.
  static Config from_string(const std::string& yaml, const std::vector<std::string>& overrides = {},
                            const std::string& source = "<string>");
  // Same, from a file; a missing file is an InputError naming it.
  static Config from_file(const std::string& path, const std::vector<std::string>& overrides = {});

  // A view of the sub-map `key` (an empty map when absent). Shares the used-key bookkeeping.
  Config section(std::string_view key) const;

  bool has(std::string_view key) const;

  // Reads `key` into `value` when present (type errors name the full key), and records the final
  // value in the resolved config either way.
  template <class T>
  void get(std::string_view key, T& value) const {
    std::string full = full_key(key);
    state_->known.insert(full);
    YAML::Node n = node_[std::string(key)];
    if (n.IsDefined() && !n.IsNull()) {
      state_->used.insert(full);
      try {
        value = n.as<T>();
      } catch (const YAML::Exception&) {
        throw InputError("config key '" + full + "': cannot read value '" + YAML::Dump(n) +
                         "' as " + type_name<T>());
      }
    }
    record(full, YAML::Node(value));
  }

  // Like get, but a missing key is an InputError.
  template <class T>
  T require(std::string_view key) const {
    if (!has(key)) throw InputError("config key '" + full_key(key) + "' is required");
    T value{};
    get(key, value);
    return value;
  }

  // Throws InputError listing the first key that no component read (with a close match if any).
  void check_all_used() const;

  // The values components read (defaults included), as YAML text for the run directory.
  std::string resolved_yaml() const;

  // Dotted path of this section ("" for the root).
  const std::string& prefix() const { return prefix_; }

 private:
  struct State {
    YAML::Node root;
    YAML::Node resolved;
    std::set<std::string> used;   // keys present in the document that a component read
    std::set<std::string> known;  // every key a component asked for, for "did you mean"
    std::string source;
  };
  Config(std::shared_ptr<State> state, YAML::Node node, std::string prefix)
      : state_(std::move(state)), node_(std::move(node)), prefix_(std::move(prefix)) {}
  std::string full_key(std::string_view key) const;
  void record(const std::string& full_key, const YAML::Node& value) const;
  template <class T>
  static const char* type_name() {
    if constexpr (std::is_same_v<T, bool>) return "a boolean";
    if constexpr (std::is_integral_v<T>) return "an integer";
    if constexpr (std::is_floating_point_v<T>) return "a number";
    return "the expected type";
  }

  std::shared_ptr<State> state_;
  YAML::Node node_;
  std::string prefix_;
};

}  // namespace streamrl::core
