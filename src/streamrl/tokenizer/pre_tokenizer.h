// Pre-tokenizers of tokenizer.json: they cut normalized text into the pieces ("words") that the
// BPE model encodes one at a time, and may rewrite them (ByteLevel maps bytes to its alphabet).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace streamrl::tokenizer {

// Receives each piece. `at_start` is true only for a piece that begins the original input
// (Metaspace's prepend_scheme "first" depends on it). The view is valid during the call only.
using PieceSink = std::function<void(std::string_view piece, bool at_start)>;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;

  // Passes the non-empty pieces of `text` to `sink`, in order. `text` is valid UTF-8.
  // Thread-safe.
  virtual void split(std::string_view text, bool at_start, const PieceSink& sink) const = 0;
};

// Builds the pre-tokenizer that the "pre_tokenizer" value `spec` describes; nullptr for null.
// Supported types: ByteLevel, Split, Sequence, Metaspace, Digits, Whitespace, WhitespaceSplit,
// Punctuation. Throws InputError naming `source` for any other type or a malformed field.
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& spec,
                                                  const std::string& source);

}  // namespace streamrl::tokenizer
