// A compiled PCRE2 regular expression (UTF-8, Unicode properties, JIT when available) with the
// match iteration that Hugging Face's Oniguruma-based splitting uses. Internal to tokenizer/.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace streamrl::tokenizer {

class Regex {
 public:
  // Compiles `pattern`, or matches `pattern` literally when `literal` is true. Throws InputError
  // naming `context` (e.g. the tokenizer.json path) when the pattern does not compile.
  Regex(std::string_view pattern, bool literal, std::string_view context);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) for each successive non-overlapping match in `text`, which must be
  // valid UTF-8. As in Oniguruma's find_iter, the search resumes one character after an empty
  // match, and an empty match where the previous match ended is not reported. Thread-safe.
  void for_each_match(std::string_view text,
                      const std::function<void(std::size_t, std::size_t)>& on_match) const;

  // True when some match covers text[0, ...) starting exactly at 0.
  bool matches_at_start(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace streamrl::tokenizer
