// Normalizers of tokenizer.json: string rewrites applied to each stretch of input text between
// added tokens, before pre-tokenization.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace streamrl::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;

  // The normalized form of `text` (valid UTF-8). Thread-safe.
  virtual std::string normalize(std::string_view text) const = 0;
};

// Builds the normalizer that the "normalizer" value `spec` describes; nullptr for null.
// Supported types: NFC, NFD, Lowercase, Prepend, Replace, Strip, Sequence. Throws InputError naming
// `source` for any other type (NFKC, NFKD, BertNormalizer, Precompiled, ...).
std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& spec, const std::string& source);

}  // namespace streamrl::tokenizer
