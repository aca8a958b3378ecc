// Decoders, following Hugging Face tokenizers' decoders/*.rs.
#include "streamrl/tokenizer/decoder.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "streamrl/core/errors.h"
#include "streamrl/tokenizer/byte_level.h"
#include "streamrl/tokenizer/regex.h"
#include "streamrl/tokenizer/spec.h"
#include "streamrl/tokenizer/unicode.h"

namespace streamrl::tokenizer {
namespace {

// Maps byte-level tokens back to bytes. A token with characters outside the byte-level alphabet
// (an added token such as "你好") contributes its own UTF-8 bytes. Ill-formed UTF-8 in the result,
// e.g. from a multi-byte character cut between tokens, becomes U+FFFD.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& token : tokens) {
      if (!byte_level::append_unmapped(token, bytes)) bytes += token;
    }
    tokens.assign(1,
                  unicode::is_valid_utf8(bytes) ? std::move(bytes) : unicode::to_valid_utf8(bytes));
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const auto& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
};

// Runs of "<0xAB>" tokens become their bytes: one string if they form valid UTF-8, else one U+FFFD
// per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (unicode::is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (std::size_t i = 0; i < pending.size(); ++i)
          out.emplace_back(unicode::kReplacementChar);
      }
      pending.clear();
    };
    for (auto& token : tokens) {
      if (auto byte = parse_byte_token(token)) {
        pending.push_back(static_cast<char>(*byte));
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static std::optional<uint8_t> parse_byte_token(const std::string& token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return std::nullopt;
    int value = 0;
    for (char c : token.substr(3, 2)) {
      int digit = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
      if (digit < 0) return std::nullopt;
      value = value * 16 + digit;
    }
    return static_cast<uint8_t>(value);
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& token : tokens) {
      std::string out;
      std::size_t prev = 0;
      pattern_->for_each_match(token, [&](std::size_t begin, std::size_t end) {
        if (end == begin) return;
        out.append(token, prev, begin - prev);
        out += content_;
        prev = end;
      });
      out.append(token, prev);
      token = std::move(out);
    }
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

// Removes up to `start` leading and `stop` trailing copies of `content` from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, std::size_t start, std::size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (content_.empty()) return;
    for (auto& token : tokens) {
      std::string_view view = token;
      for (std::size_t i = 0; i < start_ && view.starts_with(content_); ++i) {
        view.remove_prefix(content_.size());
      }
      for (std::size_t i = 0; i < stop_ && view.ends_with(content_); ++i) {
        view.remove_suffix(content_.size());
      }
      token = std::string(view);
    }
  }

 private:
  std::string content_;
  std::size_t start_, stop_;
};

// The replacement character becomes a space, except in the first token when a prefix was
// prepended at encoding time.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (replacement_.empty()) return;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::string_view with = i == 0 && strip_first_ ? "" : " ";
      std::string out;
      std::string_view token = tokens[i];
      for (std::size_t pos; (pos = token.find(replacement_)) != std::string_view::npos;) {
        out.append(token.substr(0, pos));
        out += with;
        token.remove_prefix(pos + replacement_.size());
      }
      out.append(token);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

// Classic BPE end-of-word suffix ("</w>"): a space between words, nothing after the last token.
class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (suffix_.empty()) return;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::string_view with = i + 1 == tokens.size() ? "" : " ";
      std::string out;
      std::string_view token = tokens[i];
      for (std::size_t pos; (pos = token.find(suffix_)) != std::string_view::npos;) {
        out.append(token.substr(0, pos));
        out += with;
        token.remove_prefix(pos + suffix_.size());
      }
      out.append(token);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string suffix_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& spec, const std::string& source) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec_type(spec, "decoder", source);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(parse_pattern(spec.at("pattern"), source),
                                            spec.at("content").get<std::string>());
  }
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(spec.at("content").get<std::string>(),
                                          spec.at("start").get<std::size_t>(),
                                          spec.at("stop").get<std::size_t>());
  }
  if (type == "Metaspace") {
    // Older files carry add_prefix_space instead of prepend_scheme.
    bool strip_first = value_or(spec, "add_prefix_space", true);
    const std::string scheme = value_or<std::string>(spec, "prepend_scheme", "");
    if (!scheme.empty()) strip_first = scheme != "never";
    return std::make_unique<MetaspaceDecoder>(
        value_or<std::string>(spec, "replacement", "\xE2\x96\x81"), strip_first);
  }
  if (type == "BPEDecoder") {
    return std::make_unique<BpeSuffixDecoder>(value_or<std::string>(spec, "suffix", "</w>"));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& step : spec.at("decoders")) {
      if (auto parsed = parse_decoder(step, source)) steps.push_back(std::move(parsed));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  throw_unsupported("decoder", type, source,
                    "ByteLevel, Fuse, Sequence, ByteFallback, Replace, Strip, Metaspace, "
                    "BPEDecoder");
}

}  // namespace streamrl::tokenizer
