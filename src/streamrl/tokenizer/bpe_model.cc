// BPE encoding of one word: characters (or byte-fallback tokens, or the unknown token) are merged
// pairwise, lowest merge rank first and leftmost first among equal ranks, with a priority queue
// over adjacent pairs as in Hugging Face's models/bpe/word.rs.
#include "streamrl/tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "streamrl/core/errors.h"
#include "streamrl/tokenizer/spec.h"
#include "streamrl/tokenizer/unicode.h"

namespace streamrl::tokenizer {
namespace {

// Words this long or longer are not cached (as in Hugging Face): they are rare and would crowd
// the cache.
constexpr std::size_t kMaxCachedWordBytes = 256;
constexpr std::size_t kCacheCapacityPerShard = 8192;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// The two tokens of merges[index], from either the "a b" or the ["a", "b"] form.
std::pair<std::string, std::string> merge_tokens(const nlohmann::json& merge, std::size_t index,
                                                 const std::string& source) {
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return {merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  if (merge.is_string()) {
    const std::string& line = merge.get_ref<const std::string&>();
    const std::size_t space = line.find(' ');
    if (space != std::string::npos && line.find(' ', space + 1) == std::string::npos) {
      return {line.substr(0, space), line.substr(space + 1)};
    }
  }
  throw InputError("merges entry " + std::to_string(index) + " (" + merge.dump() + ") in " +
                   source + " is not two tokens (\"a b\" or [\"a\", \"b\"])");
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& spec, const std::string& source) : source_(source) {
  const std::string type = spec.contains("type") ? spec_type(spec, "model", source) : "BPE";
  if (type != "BPE") {
    throw InputError("unsupported tokenizer model type '" + type + "' in " + source +
                     " (supported: BPE)");
  }
  if (value_or(spec, "dropout", 0.0) > 0.0) {
    throw InputError("BPE dropout is not supported (encoding must be deterministic) in " + source);
  }

  // 1. Vocabulary, both directions.
  const auto& vocab = spec.at("vocab");
  vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab.items()) {
    const auto value = id.get<int32_t>();
    if (value < 0) throw InputError("negative id for token '" + token + "' in " + source);
    vocab_.emplace(token, value);
    max_id = std::max(max_id, value);
  }
  id_to_token_.resize(max_id + 1);
  has_id_.assign(max_id + 1, false);
  for (const auto& [token, id] : vocab_) {
    id_to_token_[id] = token;
    has_id_[id] = true;
  }

  // 2. Options.
  unk_token_ = value_or<std::string>(spec, "unk_token", "");
  continuing_subword_prefix_ = value_or<std::string>(spec, "continuing_subword_prefix", "");
  end_of_word_suffix_ = value_or<std::string>(spec, "end_of_word_suffix", "");
  fuse_unk_ = value_or(spec, "fuse_unk", false);
  byte_fallback_ = value_or(spec, "byte_fallback", false);
  ignore_merges_ = value_or(spec, "ignore_merges", false);
  byte_token_ids_.fill(-1);
  if (byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      if (auto id = token_to_id(name)) byte_token_ids_[b] = *id;
    }
  }

  // 3. Merges: rank = position; the merged token is left + right without right's subword prefix.
  const auto& merges = spec.at("merges");
  merges_.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    auto [left, right] = merge_tokens(merges[i], i, source);
    auto lookup = [&](const std::string& token) {
      auto id = token_to_id(token);
      if (!id) {
        throw InputError("merges entry " + std::to_string(i) + " (" + merges[i].dump() + ") in " +
                         source + " refers to token '" + token +
                         "' which is not in the vocabulary");
      }
      return *id;
    };
    const int32_t left_id = lookup(left), right_id = lookup(right);
    std::string_view right_rest = right;
    if (!continuing_subword_prefix_.empty() && right_rest.starts_with(continuing_subword_prefix_)) {
      right_rest.remove_prefix(continuing_subword_prefix_.size());
    }
    const int32_t new_id = lookup(left + std::string(right_rest));
    // A pair listed twice keeps its last rank, as Hugging Face's HashMap collection does.
    merges_.insert_or_assign(pair_key(left_id, right_id),
                             MergeRule{static_cast<int32_t>(i), new_id});
  }
}

BpeModel::~BpeModel() = default;

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id > max_id() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

const BpeModel::MergeRule* BpeModel::find_merge(int32_t left, int32_t right) const {
  auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (word.size() >= kMaxCachedWordBytes) {
    merge_word(word, out);
    return;
  }
  CacheShard& shard = cache_[std::hash<std::string_view>{}(word) % kCacheShards];
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.words.find(word);
    if (it != shard.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard lock(shard.mu);
  if (shard.words.size() < kCacheCapacityPerShard) shard.words.emplace(word, std::move(ids));
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // Symbols form a linked list inside the vector; a merged-away symbol gets len 0.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id, uint32_t len) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, len});
  };

  // 1. One symbol per character; unknown characters fall back to byte tokens, else to the unknown
  // token (fused into one when fuse_unk), else are dropped, as Hugging Face does.
  uint32_t pending_unk_len = 0;  // bytes covered by an unknown token not yet added
  auto flush_unk = [&] {
    if (pending_unk_len > 0) add(unk_id(), pending_unk_len);
    pending_unk_len = 0;
  };
  std::string affixed;
  for (std::size_t pos = 0; pos < word.size();) {
    const auto len =
        static_cast<uint32_t>(unicode::char_len(static_cast<unsigned char>(word[pos])));
    const std::string_view ch = word.substr(pos, len);
    const bool first = pos == 0, last = pos + len >= word.size();
    std::optional<int32_t> id;
    if ((!first && !continuing_subword_prefix_.empty()) || (last && !end_of_word_suffix_.empty())) {
      affixed = first ? "" : continuing_subword_prefix_;
      affixed += ch;
      if (last) affixed += end_of_word_suffix_;
      id = token_to_id(affixed);
    } else {
      id = token_to_id(ch);
    }
    pos += len;
    if (id) {
      flush_unk();
      add(*id, len);
    } else if (byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char b) {
                 return byte_token_ids_[static_cast<unsigned char>(b)] >= 0;
               })) {
      for (char b : ch) add(byte_token_ids_[static_cast<unsigned char>(b)], 1);
    } else if (!unk_token_.empty()) {
      if (!fuse_unk_) flush_unk();
      pending_unk_len += len;
    }
  }
  flush_unk();

  // 2. Merge with a min-heap of (rank, position); stale entries are skipped when popped.
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Candidate> heap;
  auto push = [&](int32_t pos) {
    const Symbol& s = symbols[pos];
    if (s.next < 0) return;
    if (const MergeRule* rule = find_merge(s.id, symbols[s.next].id)) {
      heap.push_back({rule->rank, pos, rule->new_id});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const MergeRule* rule = find_merge(left.id, right.id);
    if (!rule || rule->new_id != top.new_id) continue;  // the pair changed since it was queued
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) out.push_back(s.id);
  }
}

int32_t BpeModel::unk_id() const {
  auto id = token_to_id(unk_token_);
  if (!id) {
    throw InputError("unk_token '" + unk_token_ + "' of " + source_ +
                     " is not in the model vocabulary");
  }
  return *id;
}

}  // namespace streamrl::tokenizer
