// The answer marker of the built-in tasks: a demonstration ends with "#<integer>", and the
// verifier reads the integer that follows the first '#' of a completion.
#pragma once

#include <optional>
#include <string_view>

namespace streamrl::tasks {

inline constexpr char kAnswerMarker = '#';

// ASCII 0-9 only (std::isdigit depends on the locale).
inline constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The answer token of `completion`: at the first '#', skip further '#', spaces and tabs, then take
// the longest run matching -?[0-9]+. Everything after that run is ignored, so text the model adds
// after its answer line (including another '#') cannot change or hedge the answer, and the
// GSM8K-style "#### 42" also parses. nullopt when there is no '#' or no integer right after it.
std::optional<std::string_view> find_marked_answer(std::string_view completion);

// 1.0 when the marked answer equals `reference` character for character, else 0.0. References
// are canonical integers, so a leading zero ("#052") is a wrong answer, not a formatting slip.
double score_marked_answer(std::string_view reference, std::string_view completion);

}  // namespace streamrl::tasks
