// Unicode character data tables (generated into unicode_tables.cc by gen_unicode_tables.py).
// Internal to the tokenizer; unicode.h is the interface the rest of the module uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace streamrl::tokenizer::unicode_tables {

// Canonical combining class `ccc` of every code point in [first, last]; absent code points have 0.
struct CombiningClassRange {
  char32_t first;
  char32_t last;
  uint8_t ccc;
};

// One-level canonical decomposition of `cp` into `first` and `second` (0 for a singleton).
struct Decomposition {
  char32_t cp;
  char32_t first;
  char32_t second;
  uint8_t flags;  // kPrimaryComposite | kNotNfc
};
inline constexpr uint8_t kPrimaryComposite = 1;  // canonical composition may produce `cp`
inline constexpr uint8_t kNotNfc = 2;            // `cp` alone is not in NFC

// Code points first, first + stride, ..., last lowercase to themselves plus `delta`.
struct LowercaseRun {
  char32_t first;
  char32_t last;
  uint8_t stride;
  int32_t delta;
};

// Each table is sorted by its first field.
extern const CombiningClassRange kCombiningClasses[];
extern const std::size_t kNumCombiningClasses;
extern const Decomposition kDecompositions[];
extern const std::size_t kNumDecompositions;
extern const LowercaseRun kLowercaseRuns[];
extern const std::size_t kNumLowercaseRuns;

}  // namespace streamrl::tokenizer::unicode_tables
