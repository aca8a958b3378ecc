// The tokenizer.json pipeline: added tokens are cut out of the raw text, the stretches between
// them are normalized and pre-tokenized, each piece is BPE-encoded, and the post-processor template
// adds special tokens. Decoding maps ids to token strings and runs the decoder chain.
#include "streamrl/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>

#include "streamrl/core/errors.h"
#include "streamrl/tokenizer/added_vocabulary.h"
#include "streamrl/tokenizer/bpe_model.h"
#include "streamrl/tokenizer/decoder.h"
#include "streamrl/tokenizer/normalizer.h"
#include "streamrl/tokenizer/pre_tokenizer.h"
#include "streamrl/tokenizer/spec.h"
#include "streamrl/tokenizer/unicode.h"

namespace streamrl::tokenizer {
namespace {

using Json = nlohmann::json;

// Names that common models use for their special tokens, tried when no config names them.
constexpr std::array<std::string_view, 4> kBosNames = {"<|begin_of_text|>", "<s>", "<bos>",
                                                       "<|startoftext|>"};
constexpr std::array<std::string_view, 6> kEosNames = {
    "<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "<|eot_id|>", "<|im_end|>"};
constexpr std::array<std::string_view, 3> kPadNames = {"<pad>", "<|pad|>", "[PAD]"};

const Json& member(const Json& object, const char* key) {
  static const Json kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::vector<AddedToken> parse_added_tokens(const Json& list) {
  std::vector<AddedToken> tokens;
  if (list.is_null()) return tokens;
  for (const auto& entry : list) {
    AddedToken token;
    token.id = entry.at("id").get<int32_t>();
    token.content = entry.at("content").get<std::string>();
    token.single_word = value_or(entry, "single_word", false);
    token.lstrip = value_or(entry, "lstrip", false);
    token.rstrip = value_or(entry, "rstrip", false);
    token.special = value_or(entry, "special", false);
    token.normalized = value_or(entry, "normalized", !token.special);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

// A tokenizer_config.json token entry: a string, null, or an AddedToken object with "content".
std::optional<std::string> config_token(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_null()) return std::string();
  if (it->is_object()) return it->at("content").get<std::string>();
  return it->get<std::string>();
}

}  // namespace

TokenizerConfig parse_tokenizer_config(const std::string& json_text, const std::string& source) {
  try {
    const Json config = Json::parse(json_text);
    if (!config.is_object()) throw InputError(source + " is not a JSON object");
    TokenizerConfig out;
    out.bos_token = config_token(config, "bos_token");
    out.eos_token = config_token(config, "eos_token");
    out.pad_token = config_token(config, "pad_token");
    if (config.contains("add_bos_token")) out.add_bos_token = config["add_bos_token"].get<bool>();
    if (config.contains("add_eos_token")) out.add_eos_token = config["add_eos_token"].get<bool>();
    return out;
  } catch (const Json::exception& e) {
    throw InputError("malformed tokenizer config " + source + ": " + e.what());
  }
}

BpeTokenizer::BpeTokenizer(std::string json_text, const std::string& source,
                           const TokenizerConfig& config)
    : json_text_(std::move(json_text)) {
  Json spec;
  try {
    spec = Json::parse(json_text_);
  } catch (const Json::parse_error& e) {
    throw InputError("malformed JSON in " + source + ": " + e.what());
  }
  try {
    if (!spec.is_object() || !spec.contains("model")) {
      throw InputError(source + " is not a tokenizer.json (no \"model\" object)");
    }
    model_ = std::make_unique<BpeModel>(spec.at("model"), source);
    normalizer_ = parse_normalizer(member(spec, "normalizer"), source);
    pre_tokenizer_ = parse_pre_tokenizer(member(spec, "pre_tokenizer"), source);
    decoder_ = parse_decoder(member(spec, "decoder"), source);
    // The `normalized` flag of added tokens matters only with a normalizer; Hugging Face matches
    // such tokens against the normalized text, and so do we.
    added_ = std::make_unique<AddedVocabulary>(parse_added_tokens(member(spec, "added_tokens")),
                                               normalizer_.get());
    int32_t max_id = model_->max_id();
    for (const AddedToken& token : added_->tokens()) max_id = std::max(max_id, token.id);
    vocab_size_ = max_id + 1;
    template_ = parse_post_processor(member(spec, "post_processor"), source);
    resolve_special_tokens(config, source);
  } catch (const Json::exception& e) {
    throw InputError("invalid tokenizer.json " + source + ": " + e.what());
  }
}

BpeTokenizer::~BpeTokenizer() = default;

std::optional<BpeTokenizer::Template> BpeTokenizer::parse_post_processor(
    const Json& spec, const std::string& source) {
  if (spec.is_null()) return std::nullopt;
  const std::string type = spec_type(spec, "post_processor", source);
  if (type == "ByteLevel") return std::nullopt;  // it only trims offsets, which we do not track
  if (type == "TemplateProcessing") {
    Template items;
    for (const auto& piece : spec.at("single")) {
      if (piece.contains("Sequence")) {
        items.push_back({true, {}});
        continue;
      }
      const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
      const Json& special = member(member(spec, "special_tokens"), name.c_str());
      if (special.is_null()) {
        throw InputError("post_processor template in " + source + " uses special token '" + name +
                         "' missing from its special_tokens");
      }
      items.push_back({false, special.at("ids").get<std::vector<int32_t>>()});
    }
    return items;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    return Template{{false, {spec.at("cls").at(1).get<int32_t>()}},
                    {true, {}},
                    {false, {spec.at("sep").at(1).get<int32_t>()}}};
  }
  if (type == "Sequence") {
    // Each processor wraps the output of the previous one.
    Template composed = {{true, {}}};
    for (const auto& step : spec.at("processors")) {
      auto outer = parse_post_processor(step, source);
      if (!outer) continue;
      Template next;
      for (auto& item : *outer) {
        if (item.is_sequence) {
          next.insert(next.end(), composed.begin(), composed.end());
        } else {
          next.push_back(std::move(item));
        }
      }
      composed = std::move(next);
    }
    return composed;
  }
  throw_unsupported("post_processor", type, source,
                    "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence");
}

void BpeTokenizer::resolve_special_tokens(const TokenizerConfig& config,
                                          const std::string& source) {
  auto by_name = [&](std::span<const std::string_view> names) -> int32_t {
    for (std::string_view name : names) {
      if (auto id = token_to_id(name)) return *id;
    }
    return -1;
  };
  auto resolve = [&](const std::optional<std::string>& configured, const char* what,
                     int32_t fallback) -> int32_t {
    if (!configured) return fallback;
    if (configured->empty()) return -1;
    auto id = token_to_id(*configured);
    if (!id) {
      throw InputError(std::string(what) + " '" + *configured +
                       "' from tokenizer_config.json is not in the vocabulary of " + source);
    }
    return *id;
  };
  // The template's fixed ids before the text are a BOS, those after it an EOS.
  int32_t template_bos = -1, template_eos = -1;
  if (template_) {
    auto sequence = std::find_if(template_->begin(), template_->end(),
                                 [](const TemplateItem& item) { return item.is_sequence; });
    if (sequence != template_->begin() && !template_->front().ids.empty()) {
      template_bos = template_->front().ids.front();
    }
    if (sequence != template_->end() && sequence + 1 != template_->end() &&
        !template_->back().ids.empty()) {
      template_eos = template_->back().ids.back();
    }
  }
  bos_id_ =
      resolve(config.bos_token, "bos_token", template_bos >= 0 ? template_bos : by_name(kBosNames));
  eos_id_ =
      resolve(config.eos_token, "eos_token", template_eos >= 0 ? template_eos : by_name(kEosNames));
  pad_id_ = resolve(config.pad_token, "pad_token", by_name(kPadNames));

  // transformers rebuilds the template from add_bos_token/add_eos_token when a config sets them.
  if (config.add_bos_token || config.add_eos_token) {
    const bool add_bos = config.add_bos_token.value_or(false);
    const bool add_eos = config.add_eos_token.value_or(false);
    if ((add_bos && bos_id_ < 0) || (add_eos && eos_id_ < 0)) {
      throw InputError("tokenizer_config.json for " + source +
                       " sets add_bos_token/add_eos_token but names no such token");
    }
    Template items;
    if (add_bos) items.push_back({false, {bos_id_}});
    items.push_back({true, {}});
    if (add_eos) items.push_back({false, {eos_id_}});
    template_ = std::move(items);
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!unicode::is_valid_utf8(text)) {
    repaired = unicode::to_valid_utf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  const PieceSink encode_piece = [&](std::string_view piece, bool) {
    model_->encode_word(piece, ids);
  };
  added_->split(
      text, normalizer_.get(),
      [&](std::string_view stretch, bool at_start) {
        if (pre_tokenizer_) {
          pre_tokenizer_->split(stretch, at_start, encode_piece);
        } else {
          encode_piece(stretch, at_start);
        }
      },
      [&](int32_t id) { ids.push_back(id); });
  if (!add_special_tokens || !template_) return ids;
  std::vector<int32_t> out;
  out.reserve(ids.size() + 4);
  for (const TemplateItem& item : *template_) {
    const auto& source = item.is_sequence ? ids : item.ids;
    out.insert(out.end(), source.begin(), source.end());
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* added = added_->find(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (const std::string* token = model_->id_to_token(id)) {
      tokens.push_back(*token);
    }
  }
  std::string text;
  if (decoder_) {
    decoder_->decode_chain(tokens);
    for (const auto& token : tokens) text += token;
  } else {
    // Without a decoder Hugging Face joins the tokens with spaces.
    for (std::size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
  }
  return unicode::is_valid_utf8(text) ? text : unicode::to_valid_utf8(text);
}

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_->token_to_id(token)) return id;
  return model_->token_to_id(token);
}

std::optional<std::string> BpeTokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* added = added_->find(id)) return added->content;
  if (const std::string* token = model_->id_to_token(id)) return *token;
  return std::nullopt;
}

}  // namespace streamrl::tokenizer
