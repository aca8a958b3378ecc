// Disjoint train and held-out eval problems of a task. The split is decided by a hash of the
// prompt, not of the seed: small tasks repeat prompts under different seeds ("3+4=" is common), so
// only a prompt-level split guarantees that no eval prompt is ever trained on.
#pragma once

#include <cstdint>
#include <string_view>

#include "streamrl/tasks/task.h"

namespace streamrl::tasks {

enum class Split { kTrain, kEval };

std::string_view split_name(Split split);

// One prompt in kEvalModulus (by a 64-bit hash of its bytes) belongs to the eval split.
inline constexpr uint64_t kEvalModulus = 8;
Split split_of(std::string_view prompt);

// The candidate seed for problem `index` of `split` of a run seeded with `base`; `attempt` counts
// candidates rejected because their prompt fell in the other split. Distinct arguments give
// independent seeds.
uint64_t problem_seed(uint64_t base, Split split, uint64_t index, uint64_t attempt = 0);

// Problem `index` of `split`: the first candidate seed whose prompt is in `split`. Deterministic in
// (task, base, split, index). Throws InputError when kMaxSplitAttempts candidates all fall in the
// other split, which happens only for tasks with very few distinct prompts. A JSONL dataset drawn
// this way is split 7:1 by prompt; to use separate train and eval files, iterate JsonlTask's
// problems by index instead.
inline constexpr int kMaxSplitAttempts = 1000;
Problem draw_problem(const Task& task, uint64_t base, Split split, uint64_t index);

}  // namespace streamrl::tasks
