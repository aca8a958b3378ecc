// Normalizers, following Hugging Face tokenizers' normalizers/*.rs.
#include "streamrl/tokenizer/normalizer.h"

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "streamrl/tokenizer/regex.h"
#include "streamrl/tokenizer/spec.h"
#include "streamrl/tokenizer/unicode.h"

namespace streamrl::tokenizer {
namespace {

class NfcNormalizer : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override { return unicode::nfc(text); }
};

class NfdNormalizer : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override { return unicode::nfd(text); }
};

class LowercaseNormalizer : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override { return unicode::lowercase(text); }
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override {
    return text.empty() ? std::string() : prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

// Replaces every non-empty match of a pattern by `content`.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string normalize(std::string_view text) const override {
    std::string out;
    out.reserve(text.size());
    std::size_t prev = 0;
    pattern_->for_each_match(text, [&](std::size_t begin, std::size_t end) {
      if (end == begin) return;
      out.append(text.substr(prev, begin - prev));
      out += content_;
      prev = end;
    });
    out.append(text.substr(prev));
    return out;
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

// Strips Unicode whitespace from the left and/or right end.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override {
    std::size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        std::size_t pos = begin;
        if (!unicode::is_whitespace(unicode::next_code_point(text, pos))) break;
        begin = pos;
      }
    }
    if (right_) {
      while (end > begin) {
        std::size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        std::size_t pos = start;
        if (!unicode::is_whitespace(unicode::next_code_point(text, pos))) break;
        end = start;
      }
    }
    return std::string(text.substr(begin, end - begin));
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string out(text);
    for (const auto& step : steps_) out = step->normalize(out);
    return out;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& spec,
                                             const std::string& source) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec_type(spec, "normalizer", source);
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "NFD") return std::make_unique<NfdNormalizer>();
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Prepend") {
    return std::make_unique<PrependNormalizer>(spec.at("prepend").get<std::string>());
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(parse_pattern(spec.at("pattern"), source),
                                               spec.at("content").get<std::string>());
  }
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(value_or(spec, "strip_left", true),
                                             value_or(spec, "strip_right", true));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& step : spec.at("normalizers")) {
      if (auto parsed = parse_normalizer(step, source)) steps.push_back(std::move(parsed));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  throw_unsupported("normalizer", type, source,
                    "NFC, NFD, Lowercase, Prepend, Replace, Strip, Sequence");
}

}  // namespace streamrl::tokenizer
