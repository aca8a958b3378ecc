// Small tokenizer.json fixtures written by the tests themselves (no Hugging Face files are
// available offline): a byte-level BPE whose base vocabulary is the 256 byte-level characters with
// id = byte value, and whose i-th merge creates id 256 + i, so expected ids can be worked out by
// hand from the merge ranks.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "streamrl/tokenizer/byte_level.h"

namespace streamrl::tokenizer::testing {

// Regexes of the Llama-3 and Qwen2 tokenizer.json Split pre-tokenizers.
inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

inline std::string mapped(const std::string& raw) {
  std::string out;
  byte_level::append_mapped(raw, out);
  return out;
}

struct ByteLevelFixture {
  std::vector<std::pair<std::string, std::string>> merges;  // raw text, e.g. {" w", "or"}
  bool pair_form = false;                                   // ["a", "b"] instead of "a b"
  bool ignore_merges = false;
  nlohmann::json normalizer = nullptr;
  nlohmann::json pre_tokenizer = {{"type", "ByteLevel"},
                                  {"add_prefix_space", false},
                                  {"trim_offsets", true},
                                  {"use_regex", true}};
  nlohmann::json post_processor = nullptr;
  nlohmann::json added_tokens = nlohmann::json::array();

  std::string json() const {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[mapped(std::string(1, static_cast<char>(b)))] = b;
    nlohmann::json merge_list = nlohmann::json::array();
    for (std::size_t i = 0; i < merges.size(); ++i) {
      const auto& [a, b] = merges[i];
      vocab[mapped(a + b)] = 256 + static_cast<int>(i);
      if (pair_form) {
        merge_list.push_back({mapped(a), mapped(b)});
      } else {
        merge_list.push_back(mapped(a) + " " + mapped(b));
      }
    }
    nlohmann::json model = {{"type", "BPE"},          {"dropout", nullptr},
                            {"unk_token", nullptr},   {"fuse_unk", false},
                            {"byte_fallback", false}, {"ignore_merges", ignore_merges},
                            {"vocab", vocab},         {"merges", merge_list}};
    nlohmann::json tokenizer = {{"version", "1.0"},
                                {"added_tokens", added_tokens},
                                {"normalizer", normalizer},
                                {"pre_tokenizer", pre_tokenizer},
                                {"post_processor", post_processor},
                                {"decoder", {{"type", "ByteLevel"}}},
                                {"model", model}};
    return tokenizer.dump();
  }
};

inline nlohmann::json added_token(int id, const std::string& content, bool special = true) {
  return {{"id", id},        {"content", content},     {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", !special}, {"special", special}};
}

// Split(pattern, Isolated) then ByteLevel without its own regex: the Llama-3 / Qwen2 layout.
inline nlohmann::json split_then_byte_level(const char* pattern) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", pattern}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", true},
             {"use_regex", false}}}}};
}

}  // namespace streamrl::tokenizer::testing
