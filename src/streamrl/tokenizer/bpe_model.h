// The BPE model of tokenizer.json: vocabulary, ranked merges, and the word-level encoding with a
// cache, byte fallback, unknown token and ignore_merges (Hugging Face models/bpe/model.rs).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace streamrl::tokenizer {

class BpeModel {
 public:
  // Builds the model from the "model" value of a tokenizer.json. Merges may be "a b" strings or
  // ["a", "b"] pairs; their order is their rank. Throws InputError naming `source` when the type is
  // not BPE, a merge names a token missing from the vocabulary, or dropout is set.
  BpeModel(const nlohmann::json& spec, const std::string& source);
  ~BpeModel();
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of one pre-tokenized piece (non-empty) to `out`. Thread-safe.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr when the id is not in the vocab
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
  struct MergeRule {
    int32_t rank;
    int32_t new_id;
  };

  // Encodes `word` from its characters by applying merges lowest rank first.
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  const MergeRule* find_merge(int32_t left, int32_t right) const;
  // Id of unk_token; throws InputError when the vocabulary lacks it (Hugging Face fails the same
  // way, and also only when an unknown character is met).
  int32_t unk_id() const;

  std::string source_;

  StringMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, MergeRule> merges_;
  std::string unk_token_;  // empty: unknown characters are dropped
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_token_ids_;  // id of "<0xAB>" per byte, -1 when absent

  // Word -> ids cache, sharded to keep lock contention low when several threads encode.
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
  };
  static constexpr std::size_t kCacheShards = 16;
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace streamrl::tokenizer
