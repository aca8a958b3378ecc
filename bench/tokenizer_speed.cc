// Tokenizer throughput benchmark. The BPE is trained here (plain frequency-driven BPE over
// pre-tokenized words, as Hugging Face's BpeTrainer does) because no real tokenizer.json can be
// downloaded; the text mixes Zipf-distributed words, numbers, punctuation, contractions and
// non-ASCII (accents, CJK, Cyrillic, emoji) so that the word cache does not see only repeats.
#include "tokenizer_speed.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "streamrl/core/clock.h"
#include "streamrl/tokenizer/bpe_tokenizer.h"
#include "streamrl/tokenizer/byte_level.h"
#include "streamrl/tokenizer/pre_tokenizer.h"

namespace streamrl::bench {
namespace {

using Json = nlohmann::json;
namespace tok = streamrl::tokenizer;

constexpr double kGoalEncodeMbPerS = 5.0;
constexpr int kMerges = 2000;
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// ---------------------------------------------------------------------------------------------
// Text

std::string make_text(std::size_t bytes, uint32_t seed) {
  static const char* kCommon[] = {
      "the",    "of",     "and",     "to",       "in",    "is",    "that",  "for",   "it",
      "as",     "was",    "with",    "be",       "by",    "on",    "not",   "he",    "this",
      "are",    "or",     "his",     "from",     "at",    "which", "but",   "have",  "an",
      "had",    "they",   "you",     "were",     "their", "one",   "all",   "we",    "can",
      "her",    "has",    "there",   "been",     "if",    "more",  "when",  "will",  "would",
      "who",    "so",     "no",      "model",    "data",  "time",  "first", "after", "system",
      "number", "people", "between", "training", "reward"};
  static const char* kSyllables[] = {"ka",   "lo",  "ther", "ing", "ment", "pre", "con", "ra",
                                     "tion", "ble", "al",   "er",  "in",   "st",  "qu",  "ve",
                                     "sh",   "ou",  "ly",   "de",  "re",   "un",  "ex",  "or"};
  static const char* kRare[] = {"café",    "naïve", "Zürich", "São",      "東京",  "北京", "Москва",
                                "😀",       "🚀",     "–",      "“quoted”", "don't", "it's", "we're",
                                "they'll", "I'm",   "x_1",    "f(x)",     "a+b=c", "e.g.", "#42"};
  std::mt19937 rng(seed);
  std::vector<std::string> words(std::begin(kCommon), std::end(kCommon));
  std::uniform_int_distribution<int> syllable(0, std::size(kSyllables) - 1);
  while (words.size() < 4000) {
    std::string w;
    for (int n = 2 + rng() % 3; n > 0; --n) w += kSyllables[syllable(rng)];
    words.push_back(w);
  }
  std::vector<double> zipf(words.size());
  for (std::size_t i = 0; i < zipf.size(); ++i) zipf[i] = 1.0 / (i + 1);
  std::discrete_distribution<std::size_t> pick(zipf.begin(), zipf.end());
  std::uniform_real_distribution<double> u(0, 1);

  std::string text;
  text.reserve(bytes + 256);
  while (text.size() < bytes) {
    const int length = 5 + rng() % 16;
    for (int i = 0; i < length; ++i) {
      std::string w;
      const double r = u(rng);
      if (r < 0.04) {
        w = kRare[rng() % std::size(kRare)];
      } else if (r < 0.07) {
        w = std::to_string(rng() % (r < 0.05 ? 2030 : 1000000));
      } else if (r < 0.075) {
        w = std::to_string(rng() % 100) + "." + std::to_string(rng() % 100) + "%";
      } else {
        w = words[pick(rng)];
      }
      if (i == 0 && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 'a' + 'A');
      text += (i ? " " : "") + w;
      if (i + 1 < length && u(rng) < 0.08) text += ",";
    }
    text += ".?!"[rng() % 3 == 0 ? rng() % 3 : 0];
    const double r = u(rng);
    text += r < 0.1 ? "\n\n" : r < 0.15 ? "\n" : " ";
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// BPE training: repeatedly merge the most frequent adjacent pair (ties: smallest ids).

struct TrainedBpe {
  std::vector<std::string> tokens;  // id -> byte-level token
  std::vector<std::pair<int32_t, int32_t>> merges;
};

TrainedBpe train_bpe(const std::string& text, const tok::PreTokenizer& pre, int num_merges) {
  TrainedBpe out;
  std::unordered_map<std::string, int32_t> ids;
  for (int b = 0; b < 256; ++b) {
    std::string t;
    tok::byte_level::append_mapped(std::string(1, static_cast<char>(b)), t);
    ids[t] = b;
    out.tokens.push_back(t);
  }
  std::unordered_map<std::string, int64_t> counts;
  pre.split(text, true, [&](std::string_view piece, bool) { ++counts[std::string(piece)]; });

  struct Word {
    std::vector<int32_t> symbols;
    int64_t count;
  };
  std::vector<Word> words;
  for (const auto& [piece, count] : counts) {
    Word w{{}, count};
    for (std::size_t pos = 0; pos < piece.size();) {
      const auto c = static_cast<unsigned char>(piece[pos]);
      const std::size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      w.symbols.push_back(ids.at(piece.substr(pos, len)));
      pos += len;
    }
    words.push_back(std::move(w));
  }
  auto key = [](int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); };
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;  // pair -> words holding it
  auto count_pairs = [&](int32_t index, int64_t sign) {
    const Word& w = words[index];
    for (std::size_t i = 0; i + 1 < w.symbols.size(); ++i) {
      const uint64_t k = key(w.symbols[i], w.symbols[i + 1]);
      if ((pair_counts[k] += sign * w.count) == 0) pair_counts.erase(k);
      if (sign > 0) where[k].push_back(index);
    }
  };
  for (int32_t i = 0; i < static_cast<int32_t>(words.size()); ++i) count_pairs(i, +1);

  std::vector<int> seen(words.size(), -1);
  for (int m = 0; m < num_merges && !pair_counts.empty(); ++m) {
    auto best = std::max_element(pair_counts.begin(), pair_counts.end(), [](auto& a, auto& b) {
      return a.second != b.second ? a.second < b.second : a.first > b.first;
    });
    const uint64_t k = best->first;
    const auto left = static_cast<int32_t>(k >> 32), right = static_cast<int32_t>(k & 0xFFFFFFFF);
    const std::string merged = out.tokens[left] + out.tokens[right];
    auto [it, inserted] = ids.emplace(merged, static_cast<int32_t>(out.tokens.size()));
    if (inserted) out.tokens.push_back(merged);
    out.merges.emplace_back(left, right);
    const std::vector<int32_t> holders = std::move(where[k]);
    where.erase(k);
    for (int32_t index : holders) {
      if (seen[index] == m) continue;
      seen[index] = m;
      count_pairs(index, -1);
      auto& s = words[index].symbols;
      std::vector<int32_t> next;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
          next.push_back(it->second);
          ++i;
        } else {
          next.push_back(s[i]);
        }
      }
      s = std::move(next);
      count_pairs(index, +1);
    }
  }
  return out;
}

// A tokenizer.json around the trained model with the given pre-tokenizer and normalizer.
std::string tokenizer_json(const TrainedBpe& bpe, const Json& pre_tokenizer,
                           const Json& normalizer) {
  Json vocab = Json::object();
  for (std::size_t id = 0; id < bpe.tokens.size(); ++id) vocab[bpe.tokens[id]] = id;
  Json merges = Json::array();
  for (const auto& [a, b] : bpe.merges) merges.push_back({bpe.tokens[a], bpe.tokens[b]});
  const auto special_id = static_cast<int>(bpe.tokens.size());
  Json added = Json::array();
  for (const char* name : {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"}) {
    added.push_back({{"id", special_id + static_cast<int>(added.size())},
                     {"content", name},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  return Json{
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", normalizer},
      {"pre_tokenizer", pre_tokenizer},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", vocab}, {"merges", merges}}}}
      .dump();
}

Json split_then_byte_level(const char* pattern) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", pattern}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
}

}  // namespace

Json run_tokenizer_speed(const BenchOptions& options) {
  const std::size_t text_bytes = options.quick ? (1u << 20) : (8u << 20);
  const std::string text = make_text(text_bytes, 1234);
  const double mb = text.size() / 1e6;

  // 1. Train on the first quarter of the text with the Llama-3 pre-tokenization.
  auto start = std::chrono::steady_clock::now();
  const Json llama3_pre = split_then_byte_level(kLlama3Pattern);
  auto pre = tok::parse_pre_tokenizer(llama3_pre, "benchmark");
  const TrainedBpe bpe = train_bpe(text.substr(0, text.size() / 4), *pre, kMerges);
  const double train_s = core::seconds_since(start);

  // 2. Encode the whole text with each layout, each with a fresh word cache.
  struct Variant {
    const char* name;
    Json pre_tokenizer;
    Json normalizer;
  };
  const Variant variants[] = {
      {"llama3", llama3_pre, nullptr},
      {"qwen2", split_then_byte_level(kQwen2Pattern), {{"type", "NFC"}}},
      {"gpt2", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}, nullptr},
  };
  Json result = {{"text_mb", mb}, {"merges", bpe.merges.size()}, {"train_s", train_s}};
  for (const Variant& v : variants) {
    tok::BpeTokenizer tokenizer(tokenizer_json(bpe, v.pre_tokenizer, v.normalizer), v.name);
    start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tokenizer.encode(text);
    const double encode_s = core::seconds_since(start);
    start = std::chrono::steady_clock::now();
    const std::vector<int32_t> warm_ids = tokenizer.encode(text);
    const double warm_s = core::seconds_since(start);
    start = std::chrono::steady_clock::now();
    const std::string decoded = tokenizer.decode(ids);
    const double decode_s = core::seconds_since(start);
    result[v.name] = {{"encode_mb_per_s", mb / encode_s},
                      {"encode_warm_cache_mb_per_s", mb / warm_s},
                      {"decode_mb_per_s", mb / decode_s},
                      {"bytes_per_token", static_cast<double>(text.size()) / ids.size()},
                      {"roundtrip_ok", decoded == text && warm_ids == ids}};
    if (std::string(v.name) == "llama3") {
      result["vocab_size"] = tokenizer.vocab_size();
      result["encode_mb_per_s"] = mb / encode_s;
      result["decode_mb_per_s"] = mb / decode_s;
      result["roundtrip_ok"] = decoded == text && warm_ids == ids;
    }
  }
  result["goal_encode_mb_per_s"] = kGoalEncodeMbPerS;
  result["threads"] = 1;
  return result;
}

}  // namespace streamrl::bench
