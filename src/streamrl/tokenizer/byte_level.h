// GPT-2's byte-to-unicode alphabet (`bytes_to_unicode`): every byte is shown as one printable code
// point, so byte-level BPE vocabularies are plain strings ("Ġ" is the space byte).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace streamrl::tokenizer::byte_level {

// Appends the byte-level form of each byte of `bytes` to `out`.
void append_mapped(std::string_view bytes, std::string& out);

// Appends the bytes that the byte-level string `token` stands for. Returns false, leaving `out`
// unchanged, when some character of `token` is outside the alphabet.
bool append_unmapped(std::string_view token, std::string& out);

}  // namespace streamrl::tokenizer::byte_level
