// Per-token text and stop sequences (see completion_text.h).
#include "streamrl/server/completion_text.h"

#include <algorithm>

namespace streamrl::server {
namespace {

// Tokens of left context decoded with each token: enough for a UTF-8 character split over up to
// four byte tokens, and for decoders whose output for a token depends on its neighbour.
constexpr size_t kContext = 4;
constexpr std::string_view kReplacement =
    "\xEF\xBF\xBD";  // U+FFFD, what a split character decodes to

std::string decode_range(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& ids,
                         size_t begin, size_t end) {
  return tok.decode(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end));
}

// Where the earliest stop sequence starts in `text`, or npos.
size_t find_stop(const std::string& text, const std::vector<std::string>& stop) {
  size_t at = std::string::npos;
  for (const auto& s : stop) at = std::min(at, text.find(s));
  return at;
}

// Length of the longest suffix of `text` that begins some stop sequence without completing it.
size_t stop_prefix_suffix(const std::string& text, const std::vector<std::string>& stop) {
  size_t longest = 0;
  for (const auto& s : stop) {
    for (size_t n = std::min(text.size(), s.size() - 1); n > longest; --n) {
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        longest = n;
        break;
      }
    }
  }
  return longest;
}

}  // namespace

std::vector<std::string> PieceDecoder::push(int32_t id) {
  ids_.push_back(id);
  return settle(false);
}

std::vector<std::string> PieceDecoder::finish() {
  return emitted_ < ids_.size() ? settle(true) : std::vector<std::string>{};
}

std::vector<std::string> PieceDecoder::settle(bool final) {
  // The window starts a few tokens before the first unsettled one; decoding it with and without
  // the tokens since then gives their text as the difference.
  const size_t begin = emitted_ > kContext ? emitted_ - kContext : 0;
  const std::string with = decode_range(tok_, ids_, begin, ids_.size());
  // A trailing U+FFFD may be half a character: hold it until the next token completes it.
  if (with.ends_with(kReplacement) && !final) return {};
  const std::string without = decode_range(tok_, ids_, begin, emitted_);
  size_t common = std::mismatch(without.begin(), without.end(), with.begin(), with.end()).first -
                  without.begin();
  // Start the piece on a character boundary, so every piece is valid UTF-8.
  while (common > 0 && common < with.size() && (with[common] & 0xC0) == 0x80) --common;
  std::vector<std::string> pieces(ids_.size() - emitted_);
  pieces.back() = with.substr(common);
  emitted_ = ids_.size();
  return pieces;
}

std::vector<std::string> token_pieces(const tokenizer::Tokenizer& tok,
                                      const std::vector<int32_t>& ids) {
  PieceDecoder decoder(tok);
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    for (auto& p : decoder.push(id)) pieces.push_back(std::move(p));
  }
  for (auto& p : decoder.finish()) pieces.push_back(std::move(p));
  return pieces;
}

ChoiceDelta ChoiceText::add(int32_t id, float logprob, std::vector<engine::TokenLogprob> top) {
  if (stopped_) return {};
  unsettled_.push_back({"", id, logprob, std::move(top)});
  std::vector<std::string> pieces = decoder_.push(id);
  for (size_t i = 0; i < pieces.size(); ++i) {
    unsettled_[i].piece = std::move(pieces[i]);
    pending_.push_back(std::move(unsettled_[i]));
  }
  unsettled_.erase(unsettled_.begin(),
                   unsettled_.begin() + static_cast<std::ptrdiff_t>(pieces.size()));
  return release(false);
}

ChoiceDelta ChoiceText::finish() {
  if (stopped_) return {};
  std::vector<std::string> pieces = decoder_.finish();
  for (size_t i = 0; i < pieces.size() && i < unsettled_.size(); ++i) {
    unsettled_[i].piece = std::move(pieces[i]);
    pending_.push_back(std::move(unsettled_[i]));
  }
  unsettled_.clear();
  return release(true);
}

ChoiceDelta ChoiceText::release(bool final) {
  std::string text;
  for (const auto& t : pending_) text += t.piece;
  // Text that a stop sequence may still complete stays until the next token decides.
  size_t safe = text.size();
  const size_t at = find_stop(text, stop_);
  if (at != std::string::npos) {
    stopped_ = true;
    safe = at;
  } else if (!final) {
    safe -= stop_prefix_suffix(text, stop_);
  }
  ChoiceDelta out;
  size_t end = 0, n = 0;
  while (n < pending_.size() && end + pending_[n].piece.size() <= safe) {
    end += pending_[n].piece.size();
    out.tokens.push_back(std::move(pending_[n++]));
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
  out.text = text.substr(0, stopped_ ? safe : end);
  if (stopped_) pending_.clear();
  return out;
}

}  // namespace streamrl::server
