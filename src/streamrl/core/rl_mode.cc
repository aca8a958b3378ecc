#include "streamrl/core/rl_mode.h"

#include <array>
#include <utility>

#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"

namespace streamrl::core {
namespace {

constexpr std::array<std::pair<Mode, const char*>, 4> kNames = {{{Mode::kColocate, "colocate"},
                                                                 {Mode::kDisagg, "disagg"},
                                                                 {Mode::kStream, "stream"},
                                                                 {Mode::kAsync, "async"}}};

}  // namespace

Mode parse_mode(const std::string& name) {
  for (const auto& [mode, n] : kNames) {
    if (name == n) return mode;
  }
  throw InputError("mode '" + name + "' is unknown (available: colocate, disagg, stream, async)");
}

std::string mode_name(Mode mode) {
  for (const auto& [m, n] : kNames) {
    if (m == mode) return n;
  }
  return "?";
}

Mode read_mode(const Config& section, const std::string& key, Mode fallback) {
  std::string name = mode_name(fallback);
  section.get(key, name);
  return parse_mode(name);
}

ModeTraits traits(Mode mode) {
  switch (mode) {
    case Mode::kColocate:
      return {.dedicated_generator = false, .on_arrival = false, .iterations_ahead = 0};
    case Mode::kDisagg:
      return {.dedicated_generator = true, .on_arrival = false, .iterations_ahead = 0};
    case Mode::kStream:
      return {.dedicated_generator = true, .on_arrival = true, .iterations_ahead = 0};
    case Mode::kAsync:
      return {.dedicated_generator = true, .on_arrival = true, .iterations_ahead = 1};
  }
  return {};
}

}  // namespace streamrl::core
