// Named reward verifiers for user datasets: "exact" (trimmed string equality),
// "numeric" (last number in the completion) and "choice" (option letter A-E). Each maps a
// (reference, completion) pair to a reward of 0 or 1.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace streamrl::tasks {

// Stateless and thread-safe.
class Verifier {
 public:
  virtual ~Verifier() = default;

  virtual std::string name() const = 0;

  // 1.0 when `completion` gives the answer `reference`, else 0.0.
  virtual double score(std::string_view reference, std::string_view completion) const = 0;

  // Why no completion could ever match `reference` (e.g. "numeric" and a reference without a
  // number), or nullopt when it is usable. Datasets check every reference once at load time.
  virtual std::optional<std::string> reference_error(std::string_view reference) const = 0;
};

// A verifier by name. Throws InputError listing the known names when there is none.
const Verifier& get_verifier(std::string_view name);

std::vector<std::string> verifier_names();

// `text` without leading and trailing spaces, tabs, CR and LF.
std::string_view trim(std::string_view text);

// The value of the last number in `text`. A number is -?D(.D)? where D is a run of digits in
// which a comma counts as a thousands separator only when exactly three digits follow it
// ("1,234" is 1234, "1,2" is 1 then 2). The minus sign counts only when no letter or digit
// precedes it, so "x-3" and "5-3" read 3. No exponents, no leading ".5". nullopt when none.
std::optional<double> last_number(std::string_view text);

// The chosen option letter in `text`: the last "answer" (any case) followed by optional ':',
// "is", spaces and '(' then a letter A-E; failing that, the last capital A-E with no letter or
// digit on either side, as in "(B)" or "B." (an "A" opening a sentence counts too, which is why
// an explicit "answer" wins). nullopt when there is none.
std::optional<char> choice_letter(std::string_view text);

}  // namespace streamrl::tasks
