// UTF-8 validation and repair, NFC/NFD (UAX #15) and lowercasing on the generated tables.
#include "streamrl/tokenizer/unicode.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "streamrl/tokenizer/unicode_tables.h"

namespace streamrl::tokenizer::unicode {
namespace {

namespace tables = unicode_tables;

// Hangul syllables compose and decompose algorithmically (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// Length of the well-formed UTF-8 sequence at text[i], or 0 with `bad` set to the length of the
// maximal ill-formed subpart to replace (Unicode §3.9, "U+FFFD substitution of maximal subparts").
std::size_t well_formed_len(std::string_view text, std::size_t i, std::size_t& bad) {
  const auto b = static_cast<unsigned char>(text[i]);
  if (b < 0x80) return 1;
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    bad = 1;
    return 0;
  }
  for (std::size_t k = 1; k < len; ++k) {
    if (i + k >= text.size()) {
      bad = k;
      return 0;
    }
    const auto c = static_cast<unsigned char>(text[i + k]);
    const unsigned char min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
    if (c < min || c > max) {
      bad = k;
      return 0;
    }
  }
  return len;
}

// Index of the first byte >= 0x80, reading eight bytes at a time.
std::size_t ascii_prefix(std::string_view text) {
  std::size_t i = 0;
  for (; i + 8 <= text.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, text.data() + i, 8);
    if (word & 0x8080808080808080ULL) break;
  }
  while (i < text.size() && static_cast<unsigned char>(text[i]) < 0x80) ++i;
  return i;
}

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = tables::kCombiningClasses + tables::kNumCombiningClasses;
  const auto* it = std::upper_bound(tables::kCombiningClasses, end, cp,
                                    [](char32_t c, const auto& r) { return c < r.first; });
  if (it == tables::kCombiningClasses) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

const tables::Decomposition* find_decomposition(char32_t cp) {
  if (cp < 0xC0) return nullptr;
  const auto* end = tables::kDecompositions + tables::kNumDecompositions;
  const auto* it = std::lower_bound(tables::kDecompositions, end, cp,
                                    [](const auto& d, char32_t c) { return d.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

// Primary composites by (first, second), and the set of code points that can be a second.
struct Composition {
  std::unordered_map<uint64_t, char32_t> pairs;
  std::unordered_set<char32_t> seconds;

  Composition() {
    for (std::size_t i = 0; i < tables::kNumDecompositions; ++i) {
      const auto& d = tables::kDecompositions[i];
      if (!(d.flags & tables::kPrimaryComposite)) continue;
      pairs.emplace(key(d.first, d.second), d.cp);
      seconds.insert(d.second);
    }
  }
  static uint64_t key(char32_t a, char32_t b) { return (uint64_t{a} << 32) | b; }

  static const Composition& get() {
    static const Composition kInstance;
    return kInstance;
  }
};

bool is_hangul_v_or_t(char32_t cp) {
  return (cp >= kVBase && cp < kVBase + kVCount) || (cp > kTBase && cp < kTBase + kTCount);
}

// True when `cp` can change under NFC or affect a neighbour (NFC_Quick_Check != Yes or ccc != 0).
bool may_change_under_nfc(char32_t cp) {
  if (cp < 0x300) return false;
  if (combining_class(cp) != 0 || is_hangul_v_or_t(cp)) return true;
  const auto* d = find_decomposition(cp);
  if (d && (d->flags & tables::kNotNfc)) return true;
  return Composition::get().seconds.count(cp) > 0;
}

void decompose(char32_t cp, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* d = find_decomposition(cp);
  if (!d) {
    out.push_back(cp);
    return;
  }
  decompose(d->first, out);
  if (d->second) decompose(d->second, out);
}

// Full canonical decomposition followed by the canonical ordering of combining marks.
std::u32string canonical_decomposition(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) decompose(next_code_point(text, pos), out);
  for (std::size_t i = 0; i < out.size();) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + i, out.begin() + j, [](char32_t a, char32_t b) {
      return combining_class(a) < combining_class(b);
    });
    i = j;
  }
  return out;
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto& pairs = Composition::get().pairs;
  auto it = pairs.find(Composition::key(a, b));
  return it == pairs.end() ? 0 : it->second;
}

std::string encode(const std::u32string& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  for (std::size_t i = ascii_prefix(text); i < text.size();) {
    std::size_t bad = 0;
    const std::size_t len = well_formed_len(text, i, bad);
    if (len == 0) return false;
    i += len;
    if (len == 1) i += ascii_prefix(text.substr(i));
  }
  return true;
}

std::string to_valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::size_t bad = 0;
    const std::size_t len = well_formed_len(text, i, bad);
    if (len == 0) {
      out += kReplacementChar;
      i += bad;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

char32_t next_code_point(std::string_view text, std::size_t& pos) {
  const auto b = static_cast<unsigned char>(text[pos]);
  const std::size_t len = char_len(b);
  char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (text[pos + k] & 0x3F);
  pos += len;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string nfc(std::string_view text) {
  // Most text is already NFC; only a code point that may change under NFC forces the full pass.
  bool quick_yes = true;
  for (std::size_t pos = ascii_prefix(text); pos < text.size() && quick_yes;) {
    quick_yes = !may_change_under_nfc(next_code_point(text, pos));
  }
  if (quick_yes) return std::string(text);

  const std::u32string d = canonical_decomposition(text);
  std::u32string out;
  out.reserve(d.size());
  std::size_t starter = std::u32string::npos;
  int last_ccc = -1;  // ccc of the last character kept after the starter; -1 when adjacent
  for (char32_t cp : d) {
    const int ccc = combining_class(cp);
    // A character combines with the last starter unless a character between them blocks it.
    const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= ccc);
    if (starter != std::u32string::npos && !blocked) {
      if (char32_t composite = compose_pair(out[starter], cp)) {
        out[starter] = composite;
        continue;
      }
    }
    if (ccc == 0) {
      starter = out.size();
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    out.push_back(cp);
  }
  return encode(out);
}

std::string nfd(std::string_view text) {
  if (ascii_prefix(text) == text.size()) return std::string(text);
  return encode(canonical_decomposition(text));
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* runs_end = tables::kLowercaseRuns + tables::kNumLowercaseRuns;
  for (std::size_t pos = 0; pos < text.size();) {
    const char c = text[pos];
    if (static_cast<unsigned char>(c) < 0x80) {
      out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
      ++pos;
      continue;
    }
    char32_t cp = next_code_point(text, pos);
    if (cp == 0x130) {  // the one code point whose lowercase is two characters: i + U+0307
      out += "i\xCC\x87";
      continue;
    }
    const auto* it = std::upper_bound(tables::kLowercaseRuns, runs_end, cp,
                                      [](char32_t c, const auto& r) { return c < r.first; });
    if (it != tables::kLowercaseRuns) {
      --it;
      if (cp <= it->last && (cp - it->first) % it->stride == 0) cp += it->delta;
    }
    append_utf8(out, cp);
  }
  return out;
}

bool is_whitespace(char32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace streamrl::tokenizer::unicode
