// Tables for the byte-level alphabet, built once from the GPT-2 rule: printable Latin-1 bytes map
// to themselves, the other 68 bytes to U+0100 onwards in byte order.
#include "streamrl/tokenizer/byte_level.h"

#include <array>

#include "streamrl/tokenizer/unicode.h"

namespace streamrl::tokenizer::byte_level {
namespace {

constexpr char32_t kMaxChar = 0x100 + 68;

struct Alphabet {
  std::array<std::string, 256> to_chars;  // byte -> UTF-8 of its code point
  std::array<int16_t, kMaxChar> to_byte;  // code point -> byte, or -1

  Alphabet() {
    to_byte.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? static_cast<char32_t>(b) : next_extra++;
      unicode::append_utf8(to_chars[b], cp);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }

  static const Alphabet& get() {
    static const Alphabet kInstance;
    return kInstance;
  }
};

}  // namespace

void append_mapped(std::string_view bytes, std::string& out) {
  const auto& alphabet = Alphabet::get();
  for (char c : bytes) out += alphabet.to_chars[static_cast<unsigned char>(c)];
}

bool append_unmapped(std::string_view token, std::string& out) {
  const auto& alphabet = Alphabet::get();
  const std::size_t old_size = out.size();
  for (std::size_t pos = 0; pos < token.size();) {
    const char32_t cp = unicode::next_code_point(token, pos);
    if (cp >= kMaxChar || alphabet.to_byte[cp] < 0) {
      out.resize(old_size);
      return false;
    }
    out.push_back(static_cast<char>(alphabet.to_byte[cp]));
  }
  return true;
}

}  // namespace streamrl::tokenizer::byte_level
