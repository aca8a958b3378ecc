// The Hugging Face generation_config.json of a checkpoint: the sampling defaults and stop tokens
// the model was released with (e.g. Llama-3-Instruct stops on <|eot_id|> as well as
// <|end_of_text|>).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

namespace streamrl::model {

// Fields of generation_config.json that streamrl uses; an unset optional means the file does not
// say (or says null). Other fields (max_length, repetition_penalty, ...) are ignored.
struct GenerationDefaults {
  std::vector<int64_t> eos_token_ids;  // "eos_token_id": an id or a list of ids
  std::optional<float> temperature;    // >= 0
  std::optional<float> top_p;          // in (0, 1]
  std::optional<int> top_k;            // >= 0; 0 disables top-k as in transformers
  std::optional<int> max_new_tokens;   // >= 1
  // "do_sample". Defaults to true (RL samples) when the file omits it, unlike transformers, whose
  // default is false (greedy).
  bool do_sample = true;

  bool operator==(const GenerationDefaults&) const = default;
};

// Reads `dir`/generation_config.json; all-default GenerationDefaults when the file is absent.
// Throws a one-line InputError naming the file (and the field) for malformed JSON, a non-object,
// a field of the wrong type or a value out of range.
GenerationDefaults load_generation_config(const std::filesystem::path& dir);

// The temperature a command samples with when its user gives none: 0 (greedy) when the file says
// "do_sample": false, else the file's temperature, else `fallback`. top_p and top_k fall back with
// value_or.
float default_temperature(const GenerationDefaults& defaults, float fallback);

}  // namespace streamrl::model
