// Per-token text and stop sequences, with the char tokenizer and a byte tokenizer whose tokens can
// split a UTF-8 character.
#include "streamrl/server/completion_text.h"

#include <gtest/gtest.h>

namespace streamrl::server {
namespace {

// One token per byte; an incomplete trailing UTF-8 sequence decodes to U+FFFD, as real byte-level
// tokenizers do.
class ByteTokenizer : public tokenizer::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool) const override {
    std::string s;
    for (int32_t id : ids) s.push_back(static_cast<char>(id));
    size_t lead = s.size();
    while (lead > 0 && (static_cast<unsigned char>(s[lead - 1]) & 0xC0) == 0x80) --lead;
    if (lead > 0 && static_cast<unsigned char>(s[lead - 1]) >= 0xC0) {
      const unsigned char c = s[lead - 1];
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      if (s.size() - (lead - 1) < need) s = s.substr(0, lead - 1) + "\xEF\xBF\xBD";
    }
    return s;
  }
  int32_t vocab_size() const override { return 256; }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return -1; }
  int32_t pad_id() const override { return -1; }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  std::optional<std::string> id_to_token(int32_t) const override { return std::nullopt; }
  std::string to_json() const override { return "{}"; }
};

TEST(TokenPieces, OnePiecePerCharacterToken) {
  auto tok = tokenizer::make_tokenizer("char");
  auto ids = tok->encode("ab c");
  ids.push_back(tok->eos_id());
  EXPECT_EQ(token_pieces(*tok, ids), (std::vector<std::string>{"a", "b", " ", "c", ""}));
}

TEST(TokenPieces, SplitCharacterGoesToTheTokenThatCompletesIt) {
  ByteTokenizer tok;
  const std::string text = "x\xC3\xA9y\xE2\x82\xAC";  // "xéy€"
  auto pieces = token_pieces(tok, tok.encode(text, false));
  EXPECT_EQ(pieces, (std::vector<std::string>{"x", "", "\xC3\xA9", "y", "", "", "\xE2\x82\xAC"}));
  // An unfinished character at the very end still shows up, as the decoder renders it.
  pieces = token_pieces(tok, tok.encode("a\xE2\x82", false));
  EXPECT_EQ(pieces.back(), "\xEF\xBF\xBD");
}

// Streams `text` through a ChoiceText token by token (char tokenizer); returns the released text
// per token, then what finish() released, joined by '|'.
std::string stream_choice(const std::string& text, const std::vector<std::string>& stop,
                          bool* stopped, std::string* tokens) {
  auto tok = tokenizer::make_tokenizer("char");
  ChoiceText choice(*tok, stop);
  std::string out;
  for (int32_t id : tok->encode(text)) {
    ChoiceDelta d = choice.add(id, -1.0f, {});
    for (const auto& t : d.tokens) *tokens += t.piece;
    out += d.text + "|";
  }
  ChoiceDelta d = choice.finish();
  for (const auto& t : d.tokens) *tokens += t.piece;
  *stopped = choice.stopped();
  return out + d.text;
}

TEST(ChoiceText, HoldsWhatMayBeginAStopSequenceAndNeverReleasesTheMatch) {
  bool stopped = false;
  std::string tokens;
  // "c" may begin "cd": held, then the match ends the choice; nothing after it comes out.
  EXPECT_EQ(stream_choice("abcde", {"cd"}, &stopped, &tokens), "a|b||||");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(tokens, "ab");
  // "c" may begin "cx", but "d" shows it does not: both come out together.
  tokens.clear();
  EXPECT_EQ(stream_choice("abcd", {"cx"}, &stopped, &tokens), "a|b||cd|");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(tokens, "abcd");
  // A held prefix at the end of the sample comes out at finish().
  tokens.clear();
  EXPECT_EQ(stream_choice("abc", {"cx"}, &stopped, &tokens), "a|b||c");
  EXPECT_EQ(tokens, "abc");
}

}  // namespace
}  // namespace streamrl::server
