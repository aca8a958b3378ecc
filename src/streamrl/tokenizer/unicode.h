// UTF-8 helpers and the Unicode normalizations that tokenizer.json normalizers ask for (NFC, NFD,
// lowercase), implemented on generated tables so the tokenizer needs no ICU. Internal to
// tokenizer/.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace streamrl::tokenizer::unicode {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// True when `text` is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);

// `text` with each maximal ill-formed subsequence replaced by U+FFFD, the rule Rust's
// String::from_utf8_lossy (and so Hugging Face decoding) follows.
std::string to_valid_utf8(std::string_view text);

// Byte length of the UTF-8 sequence whose first byte is `lead`. REQUIRES: valid UTF-8.
inline std::size_t char_len(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// The code point starting at text[pos]; advances `pos` past it. REQUIRES: valid UTF-8.
char32_t next_code_point(std::string_view text, std::size_t& pos);

void append_utf8(std::string& out, char32_t cp);

// Canonical composition / decomposition (UAX #15). Input must be valid UTF-8.
std::string nfc(std::string_view text);
std::string nfd(std::string_view text);

// Per-character full lowercase mapping, like Rust's char::to_lowercase (no final-sigma context).
std::string lowercase(std::string_view text);

// The Unicode White_Space property (Rust's char::is_whitespace).
bool is_whitespace(char32_t cp);

}  // namespace streamrl::tokenizer::unicode
