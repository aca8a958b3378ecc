// Parsing of the "#<integer>" answer marker.
#include "streamrl/tasks/answer.h"

namespace streamrl::tasks {

std::optional<std::string_view> find_marked_answer(std::string_view completion) {
  size_t i = completion.find(kAnswerMarker);
  if (i == std::string_view::npos) return std::nullopt;
  while (i < completion.size() &&
         (completion[i] == kAnswerMarker || completion[i] == ' ' || completion[i] == '\t')) {
    ++i;
  }
  const size_t begin = i;
  if (i < completion.size() && completion[i] == '-') ++i;
  const size_t digits = i;
  while (i < completion.size() && is_digit(completion[i])) ++i;
  if (i == digits) return std::nullopt;
  return completion.substr(begin, i - begin);
}

double score_marked_answer(std::string_view reference, std::string_view completion) {
  std::optional<std::string_view> answer = find_marked_answer(completion);
  return answer && *answer == reference ? 1.0 : 0.0;
}

}  // namespace streamrl::tasks
