// Decoders of tokenizer.json: they turn the token strings of a sequence of ids back into text.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace streamrl::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;

  // Rewrites `tokens` in place (possibly into fewer strings); the text is their concatenation.
  // Thread-safe.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Builds the decoder that the "decoder" value `spec` describes; nullptr for null.
// Supported types: ByteLevel, Fuse, Sequence, ByteFallback, Replace, Strip, Metaspace, BPEDecoder.
// Throws InputError naming `source` for any other type (WordPiece, CTC, ...).
std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& spec, const std::string& source);

}  // namespace streamrl::tokenizer
