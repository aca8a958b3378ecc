// Parsing of generation_config.json (see generation_config.h).
#include "streamrl/model/generation_config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::model {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// A field's value unless it is absent or null.
const Json* field(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void bad(const std::string& source, const char* key, const std::string& why) {
  throw InputError(source + ": field \"" + key + "\" " + why);
}

std::optional<float> number_field(const Json& j, const char* key, const std::string& source) {
  const Json* v = field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad(source, key, "must be a number, got " + v->dump());
  const double d = v->get<double>();
  if (!std::isfinite(d)) bad(source, key, "must be finite");
  return static_cast<float>(d);
}

std::optional<int64_t> int_field(const Json& j, const char* key, const std::string& source) {
  const Json* v = field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) bad(source, key, "must be an integer, got " + v->dump());
  return v->get<int64_t>();
}

std::optional<int> small_int_field(const Json& j, const char* key, const std::string& source,
                                   int64_t min) {
  std::optional<int64_t> v = int_field(j, key, source);
  if (!v) return std::nullopt;
  if (*v < min || *v > std::numeric_limits<int>::max()) {
    bad(source, key, "must be >= " + std::to_string(min) + ", got " + std::to_string(*v));
  }
  return static_cast<int>(*v);
}

std::vector<int64_t> eos_ids(const Json& j, const std::string& source) {
  const char* key = "eos_token_id";
  const Json* v = field(j, key);
  if (!v) return {};
  const Json list = v->is_array() ? *v : Json::array({*v});
  std::vector<int64_t> ids;
  for (const Json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      bad(source, key, "must be a non-negative integer or a list of them, got " + v->dump());
    }
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

}  // namespace

GenerationDefaults load_generation_config(const fs::path& dir) {
  const fs::path file = dir / "generation_config.json";
  GenerationDefaults out;
  if (!fs::exists(file)) return out;
  const std::string source = file.string();
  Json j;
  try {
    j = Json::parse(core::read_file(file));
  } catch (const Json::parse_error& e) {
    throw InputError(source + " is not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw InputError(source + " is not a JSON object");
  out.eos_token_ids = eos_ids(j, source);
  out.temperature = number_field(j, "temperature", source);
  if (out.temperature && *out.temperature < 0) {
    bad(source, "temperature", "must be >= 0, got " + j["temperature"].dump());
  }
  out.top_p = number_field(j, "top_p", source);
  if (out.top_p && !(*out.top_p > 0 && *out.top_p <= 1)) {
    bad(source, "top_p", "must be in (0, 1], got " + j["top_p"].dump());
  }
  out.top_k = small_int_field(j, "top_k", source, 0);
  out.max_new_tokens = small_int_field(j, "max_new_tokens", source, 1);
  if (const Json* v = field(j, "do_sample")) {
    if (!v->is_boolean()) bad(source, "do_sample", "must be true or false, got " + v->dump());
    out.do_sample = v->get<bool>();
  }
  return out;
}

float default_temperature(const GenerationDefaults& defaults, float fallback) {
  if (!defaults.do_sample) return 0;
  return defaults.temperature.value_or(fallback);
}

}  // namespace streamrl::model
