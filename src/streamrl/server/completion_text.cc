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

}  // namespace

std::vector<std::string> token_pieces(const tokenizer::Tokenizer& tok,
                                      const std::vector<int32_t>& ids) {
  std::vector<std::string> pieces(ids.size());
  size_t emitted = 0;  // tokens [0, emitted) have their text in pieces
  for (size_t k = 0; k < ids.size(); ++k) {
    // The window starts a few tokens before the first unemitted one; decoding it with and
    // without the tokens since then gives their text as the difference.
    const size_t begin = emitted > kContext ? emitted - kContext : 0;
    const std::string with = decode_range(tok, ids, begin, k + 1);
    // A trailing U+FFFD may be half a character: hold it until the next token completes it.
    if (with.ends_with(kReplacement) && k + 1 < ids.size()) continue;
    const std::string without = decode_range(tok, ids, begin, emitted);
    size_t common = std::mismatch(without.begin(), without.end(), with.begin(), with.end()).first -
                    without.begin();
    // Start the piece on a character boundary, so every piece is valid UTF-8.
    while (common > 0 && common < with.size() && (with[common] & 0xC0) == 0x80) --common;
    pieces[k] = with.substr(common);
    emitted = k + 1;
  }
  return pieces;
}

StopResult apply_stop_sequences(const std::vector<std::string>& pieces,
                                const std::vector<std::string>& stop) {
  StopResult r;
  for (const auto& p : pieces) r.text += p;
  r.tokens = pieces.size();
  size_t cut = std::string::npos, match_end = 0;
  for (const auto& s : stop) {
    const size_t at = r.text.find(s);
    if (at < cut) cut = at, match_end = at + s.size();
  }
  if (cut == std::string::npos) return r;
  r.stopped = true;
  r.text.resize(cut);
  size_t offset = 0, kept = 0;
  while (kept < pieces.size() && offset < match_end) offset += pieces[kept++].size();
  r.tokens = kept;
  return r;
}

}  // namespace streamrl::server
