// PCRE2 wrapper: compile once with UTF + UCP (so \s, \w, \d are Unicode-aware like Oniguruma's),
// JIT-compile, and iterate matches with one match-data block per call.
#include "streamrl/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "streamrl/core/errors.h"
#include "streamrl/tokenizer/unicode.h"

namespace streamrl::tokenizer {
namespace {

// Each thread gets its own JIT stack: long runs of one character class (a 100 kB word) overflow
// PCRE2's 32 kB default.
struct ThreadMatchContext {
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchContext() {
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchContext() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
  }
};

pcre2_match_context* thread_match_context() {
  thread_local ThreadMatchContext tls;
  return tls.context;
}

// Match data sized for `code`, freed on scope exit.
class MatchData {
 public:
  explicit MatchData(const pcre2_code* code)
      : data_(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(data_); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  pcre2_match_data* get() const { return data_; }

 private:
  pcre2_match_data* data_;
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }

  // Match at or after `start`; returns false when there is none.
  bool match(std::string_view text, std::size_t start, uint32_t options, pcre2_match_data* data,
             std::size_t& begin, std::size_t& end) const {
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    options |= PCRE2_NO_UTF_CHECK;  // callers pass valid UTF-8; checking costs O(n) per call
    int rc = pcre2_match(code, subject, text.size(), start, options, data, thread_match_context());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, text.size(), start, options | PCRE2_NO_JIT, data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) throw RuntimeFailure("tokenizer regex match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    begin = ovector[0];
    end = ovector[1];
    return true;
  }
};

Regex::Regex(std::string_view pattern, bool literal, std::string_view context)
    : impl_(std::make_unique<Impl>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_LITERAL refuses PCRE2_UCP, which only matters for character classes anyway.
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                              &error, &offset, nullptr);
  if (!impl_->code) {
    throw InputError("invalid regex '" + std::string(pattern) + "' in " + std::string(context) +
                     ": " + pcre2_message(error) + " at offset " + std::to_string(offset));
  }
  // Without JIT the interpreter still works, only slower; nothing to report.
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;

void Regex::for_each_match(std::string_view text,
                           const std::function<void(std::size_t, std::size_t)>& on_match) const {
  MatchData data(impl_->code);
  std::size_t start = 0, begin = 0, end = 0;
  std::size_t last_end = std::string_view::npos;
  while (start <= text.size() && impl_->match(text, start, 0, data.get(), begin, end)) {
    // Like Oniguruma's find_iter, an empty match right where the previous match ended is skipped.
    if (end > begin || begin != last_end) on_match(begin, end);
    last_end = end;
    if (end > begin) {
      start = end;
    } else if (begin < text.size()) {
      start = begin + unicode::char_len(static_cast<unsigned char>(text[begin]));
    } else {
      break;
    }
  }
}

bool Regex::matches_at_start(std::string_view text) const {
  MatchData data(impl_->code);
  std::size_t begin = 0, end = 0;
  return impl_->match(text, 0, PCRE2_ANCHORED, data.get(), begin, end);
}

}  // namespace streamrl::tokenizer
