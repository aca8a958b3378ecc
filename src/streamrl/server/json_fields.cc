// Typed JSON field reads for the HTTP API (see json_fields.h).
#include "streamrl/server/json_fields.h"

#include <algorithm>
#include <limits>

#include "streamrl/core/errors.h"

namespace streamrl::server {
namespace {

std::string range_text(double lo, double hi) {
  auto num = [](double v) {
    std::string s = nlohmann::json(v).dump();
    return s.ends_with(".0") ? s.substr(0, s.size() - 2) : s;
  };
  if (hi == std::numeric_limits<double>::max()) return ">= " + num(lo);
  return "in [" + num(lo) + ", " + num(hi) + "]";
}

}  // namespace

nlohmann::json parse_json_object(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw InputError("request body is not valid JSON");
  if (!j.is_object()) throw InputError("request body must be a JSON object");
  return j;
}

void reject_unknown_fields(const nlohmann::json& object,
                           std::initializer_list<std::string_view> known,
                           const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw InputError(where + ": unknown field '" + key + "'");
    }
  }
}

double number_field(const nlohmann::json& object, const std::string& key, double fallback,
                    double lo, double hi) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number() || it->get<double>() < lo || it->get<double>() > hi) {
    throw InputError("'" + key + "' must be a number " + range_text(lo, hi));
  }
  return it->get<double>();
}

int64_t int_field(const nlohmann::json& object, const std::string& key, int64_t fallback,
                  int64_t lo, int64_t hi) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(hi)) || it->get<int64_t>() < lo ||
      it->get<int64_t>() > hi) {
    const double dhi = hi == std::numeric_limits<int64_t>::max()
                           ? std::numeric_limits<double>::max()
                           : static_cast<double>(hi);
    throw InputError("'" + key + "' must be an integer " +
                     range_text(static_cast<double>(lo), dhi));
  }
  return it->get<int64_t>();
}

bool bool_field(const nlohmann::json& object, const std::string& key, bool fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw InputError("'" + key + "' must be true or false");
  return it->get<bool>();
}

std::vector<int32_t> token_ids(const nlohmann::json& value, const std::string& what) {
  if (!value.is_array()) throw InputError("'" + what + "' must be an array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (const auto& v : value) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      throw InputError("'" + what + "' must hold non-negative integer token ids");
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

void add_stop_ids(std::vector<int32_t>* ids, const std::vector<int32_t>& more, int32_t eos) {
  auto add = [ids](int32_t id) {
    if (std::find(ids->begin(), ids->end(), id) == ids->end()) ids->push_back(id);
  };
  if (eos >= 0) add(eos);
  for (int32_t id : more) add(id);
}

}  // namespace streamrl::server
