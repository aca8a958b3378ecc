// Typed, range-checked reads of JSON request fields for the HTTP API. Every failure is an
// InputError whose one line names the field, so the server can answer 400 with it verbatim.
// A field that is absent or null takes its default.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace streamrl::server {

// `body` parsed as a JSON object. Throws InputError for malformed JSON or another top-level type.
nlohmann::json parse_json_object(std::string_view body);

// Throws InputError naming the first key of `object` not in `known`; `where` prefixes the message
// (e.g. "requests[2]").
void reject_unknown_fields(const nlohmann::json& object,
                           std::initializer_list<std::string_view> known, const std::string& where);

double number_field(const nlohmann::json& object, const std::string& key, double fallback,
                    double lo, double hi);
int64_t int_field(const nlohmann::json& object, const std::string& key, int64_t fallback,
                  int64_t lo, int64_t hi);
bool bool_field(const nlohmann::json& object, const std::string& key, bool fallback);

// A JSON array of integer token ids; `what` names the field in errors.
std::vector<int32_t> token_ids(const nlohmann::json& value, const std::string& what);

// Appends each id of `more` (and `eos` when >= 0) that `ids` does not hold yet.
void add_stop_ids(std::vector<int32_t>* ids, const std::vector<int32_t>& more, int32_t eos);

}  // namespace streamrl::server
