// The "exact", "numeric" and "choice" verifiers and the parsers behind them.
#include "streamrl/tasks/verifiers.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "streamrl/core/errors.h"
#include "streamrl/tasks/answer.h"

namespace streamrl::tasks {
namespace {

bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool is_option(char c) { return c >= 'A' && c <= 'E'; }
char to_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

constexpr std::string_view kAnswerWord = "answer";

bool starts_with_word(std::string_view text, size_t at, std::string_view word) {
  if (text.size() - at < word.size()) return false;
  for (size_t i = 0; i < word.size(); ++i) {
    if (to_lower(text[at + i]) != word[i]) return false;
  }
  return at + word.size() == text.size() || !is_alnum(text[at + word.size()]);
}

size_t skip_spaces(std::string_view text, size_t at) {
  while (at < text.size() && is_space(text[at])) ++at;
  return at;
}

// The letter right after "answer" at `at`, as in "Answer: C", "answer is (B)".
std::optional<char> letter_after_answer(std::string_view text, size_t at) {
  at = skip_spaces(text, at + kAnswerWord.size());
  if (at < text.size() && text[at] == ':') at = skip_spaces(text, at + 1);
  if (starts_with_word(text, at, "is")) at = skip_spaces(text, at + 2);
  if (at < text.size() && text[at] == '(') ++at;
  if (at < text.size() && is_option(text[at]) &&
      (at + 1 == text.size() || !is_alnum(text[at + 1]))) {
    return text[at];
  }
  return std::nullopt;
}

// The letter of a reference such as "B", "(B)", "B)" or "b.".
std::optional<char> reference_letter(std::string_view reference) {
  std::string_view r = trim(reference);
  if (!r.empty() && r.front() == '(') r.remove_prefix(1);
  if (!r.empty() && (r.back() == ')' || r.back() == '.')) r.remove_suffix(1);
  if (r.size() != 1) return std::nullopt;
  const char c = r[0] >= 'a' && r[0] <= 'e' ? static_cast<char>(r[0] - 'a' + 'A') : r[0];
  return is_option(c) ? std::optional<char>(c) : std::nullopt;
}

class ExactVerifier final : public Verifier {
 public:
  std::string name() const override { return "exact"; }
  double score(std::string_view reference, std::string_view completion) const override {
    return trim(reference) == trim(completion) ? 1.0 : 0.0;
  }
  std::optional<std::string> reference_error(std::string_view reference) const override {
    if (trim(reference).empty()) return "answer is empty, which no completion can match";
    return std::nullopt;
  }
};

class NumericVerifier final : public Verifier {
 public:
  std::string name() const override { return "numeric"; }
  double score(std::string_view reference, std::string_view completion) const override {
    std::optional<double> want = last_number(reference);
    std::optional<double> got = last_number(completion);
    if (!want || !got) return 0.0;
    // Relative tolerance absorbs decimal round-trips ("0.30000000000000004") at any magnitude.
    const double tolerance = 1e-6 * std::max(std::fabs(*want), std::fabs(*got));
    return *want == *got || std::fabs(*want - *got) <= tolerance ? 1.0 : 0.0;
  }
  std::optional<std::string> reference_error(std::string_view reference) const override {
    if (!last_number(reference)) return "answer has no number for the numeric verifier";
    return std::nullopt;
  }
};

class ChoiceVerifier final : public Verifier {
 public:
  std::string name() const override { return "choice"; }
  double score(std::string_view reference, std::string_view completion) const override {
    std::optional<char> want = reference_letter(reference);
    std::optional<char> got = choice_letter(completion);
    return want && got && *want == *got ? 1.0 : 0.0;
  }
  std::optional<std::string> reference_error(std::string_view reference) const override {
    if (!reference_letter(reference)) {
      return "answer is not an option letter A-E (e.g. \"B\" or \"(B)\") for the choice verifier";
    }
    return std::nullopt;
  }
};

const std::vector<const Verifier*>& all_verifiers() {
  static const ExactVerifier exact;
  static const NumericVerifier numeric;
  static const ChoiceVerifier choice;
  static const std::vector<const Verifier*> verifiers = {&exact, &numeric, &choice};
  return verifiers;
}

}  // namespace

const Verifier& get_verifier(std::string_view name) {
  for (const Verifier* v : all_verifiers()) {
    if (v->name() == name) return *v;
  }
  std::string known;
  for (const std::string& n : verifier_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown verifier '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<std::string> verifier_names() {
  std::vector<std::string> names;
  for (const Verifier* v : all_verifiers()) names.push_back(v->name());
  return names;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

std::optional<double> last_number(std::string_view text) {
  std::optional<double> last;
  size_t i = 0;
  while (i < text.size()) {
    if (!is_digit(text[i])) {
      ++i;
      continue;
    }
    std::string number;
    if (i > 0 && text[i - 1] == '-' && (i < 2 || !is_alnum(text[i - 2]))) number = "-";
    while (i < text.size()) {
      if (is_digit(text[i])) {
        number += text[i++];
      } else if (text[i] == ',' && i + 3 < text.size() && is_digit(text[i + 1]) &&
                 is_digit(text[i + 2]) && is_digit(text[i + 3]) &&
                 (i + 4 == text.size() || !is_digit(text[i + 4]))) {
        ++i;
      } else {
        break;
      }
    }
    if (i + 1 < text.size() && text[i] == '.' && is_digit(text[i + 1])) {
      number += text[i++];
      while (i < text.size() && is_digit(text[i])) number += text[i++];
    }
    double value = 0.0;
    std::from_chars(number.data(), number.data() + number.size(), value);
    last = value;
  }
  return last;
}

std::optional<char> choice_letter(std::string_view text) {
  std::optional<char> answered;
  for (size_t at = 0; at < text.size(); ++at) {
    if ((at == 0 || !is_alnum(text[at - 1])) && starts_with_word(text, at, kAnswerWord)) {
      if (std::optional<char> c = letter_after_answer(text, at)) answered = c;
    }
  }
  if (answered) return answered;
  for (size_t at = text.size(); at-- > 0;) {
    if (is_option(text[at]) && (at == 0 || !is_alnum(text[at - 1])) &&
        (at + 1 == text.size() || !is_alnum(text[at + 1]))) {
      return text[at];
    }
  }
  return std::nullopt;
}

}  // namespace streamrl::tasks
