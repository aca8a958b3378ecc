// Character tokenizer: a table lookup per byte, plus the four special-token names, which are
// matched in the input the way Hugging Face matches added tokens (so to_json() round-trips ids).
#include "streamrl/tokenizer/char_tokenizer.h"

#include <array>
#include <nlohmann/json.hpp>

#include "streamrl/tokenizer/unicode.h"

namespace streamrl::tokenizer {
namespace {

constexpr std::array<std::string_view, 4> kSpecialNames = {"<pad>", "<bos>", "<eos>", "<unk>"};

int32_t id_of_ascii(unsigned char c) {
  if (c == '\n') return CharTokenizer::kNewlineId;
  if (c >= ' ' && c <= '~') return CharTokenizer::kFirstPrintableId + (c - ' ');
  return CharTokenizer::kUnkId;
}

}  // namespace

std::vector<int32_t> CharTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!unicode::is_valid_utf8(text)) {
    repaired = unicode::to_valid_utf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 1);
  if (add_special_tokens) ids.push_back(kBosId);
  for (std::size_t pos = 0; pos < text.size();) {
    const auto c = static_cast<unsigned char>(text[pos]);
    if (c == '<') {
      bool special = false;
      for (std::size_t id = 0; id < kSpecialNames.size() && !special; ++id) {
        if (text.substr(pos).starts_with(kSpecialNames[id])) {
          ids.push_back(static_cast<int32_t>(id));
          pos += kSpecialNames[id].size();
          special = true;
        }
      }
      if (special) continue;
    }
    ids.push_back(id_of_ascii(c));
    pos += unicode::char_len(c);
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= kVocabSize) continue;
    if (id == kNewlineId) {
      text.push_back('\n');
    } else if (id >= kFirstPrintableId) {
      text.push_back(static_cast<char>(' ' + (id - kFirstPrintableId)));
    } else if (!skip_special_tokens) {
      text += kSpecialNames[id];
    } else if (id == kUnkId) {
      text += unicode::kReplacementChar;
    }
  }
  return text;
}

std::optional<int32_t> CharTokenizer::token_to_id(std::string_view token) const {
  for (std::size_t id = 0; id < kSpecialNames.size(); ++id) {
    if (token == kSpecialNames[id]) return static_cast<int32_t>(id);
  }
  if (token.size() != 1) return std::nullopt;
  const int32_t id = id_of_ascii(static_cast<unsigned char>(token[0]));
  return id == kUnkId ? std::nullopt : std::optional<int32_t>(id);
}

std::optional<std::string> CharTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= kVocabSize) return std::nullopt;
  if (id < static_cast<int32_t>(kSpecialNames.size())) return std::string(kSpecialNames[id]);
  if (id == kNewlineId) return std::string("\n");
  return std::string(1, static_cast<char>(' ' + (id - kFirstPrintableId)));
}

std::string CharTokenizer::to_json() const {
  // A BPE model without merges and without pre-tokenizer encodes each character on its own, and
  // the Fuse decoder concatenates the characters back.
  using Json = nlohmann::ordered_json;
  Json vocab = Json::object();
  Json added = Json::array();
  for (int32_t id = 0; id < kVocabSize; ++id) {
    const std::string token = *id_to_token(id);
    vocab[token] = id;
    if (id < static_cast<int32_t>(kSpecialNames.size())) {
      added.push_back({{"id", id},
                       {"content", token},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
    }
  }
  const Json bos = {{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}};
  Json post_processor = {
      {"type", "TemplateProcessing"},
      {"single", Json::array({bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", Json::array({bos,
                            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                            {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
      {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {kBosId}}, {"tokens", {"<bos>"}}}}}}};
  Json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", "<unk>"},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", Json::array()}};
  Json json = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", added},
               {"normalizer", nullptr},
               {"pre_tokenizer", nullptr},
               {"post_processor", post_processor},
               {"decoder", {{"type", "Fuse"}}},
               {"model", model}};
  return json.dump(2);
}

}  // namespace streamrl::tokenizer
