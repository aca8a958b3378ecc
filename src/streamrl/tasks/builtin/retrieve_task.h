// "retrieve": long-context retrieval. The prompt lists key=value records and asks for one key's
// value; the context's length is heavy-tailed (about 0.5k to 16k characters), so attention over
// the context, not the output, is what costs: the task where sparse attention matters and its
// quality shows.
#pragma once

#include "streamrl/tasks/task.h"

namespace streamrl::tasks {

// Prompt "abc=42;xyz=17;...;?xyz=", demonstration "#17", reference "17": distinct three-letter
// keys, two-digit values (10-99), the queried record anywhere in the context.
class RetrieveTask final : public Task {
 public:
  std::string name() const override;
  std::string description() const override;
  Problem generate(uint64_t seed) const override;
  double verify(const Problem& problem, std::string_view completion) const override;
};

inline constexpr int kRetrieveMinRecords = 64;
inline constexpr int kRetrieveMaxRecords = 2340;  // 7 characters each: 16,380 characters at most

}  // namespace streamrl::tasks
