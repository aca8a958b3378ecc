// Prompt-hash train/eval split and the seed streams that feed it.
#include "streamrl/tasks/split.h"

#include <string>

#include "streamrl/core/errors.h"
#include "streamrl/tasks/rng.h"

namespace streamrl::tasks {
namespace {

// FNV-1a, then mix64 so that the low bits used by the modulus depend on every byte.
uint64_t hash_prompt(std::string_view prompt) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : prompt) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return mix64(h);
}

}  // namespace

std::string_view split_name(Split split) { return split == Split::kTrain ? "train" : "eval"; }

Split split_of(std::string_view prompt) {
  return hash_prompt(prompt) % kEvalModulus == 0 ? Split::kEval : Split::kTrain;
}

uint64_t problem_seed(uint64_t base, Split split, uint64_t index, uint64_t attempt) {
  uint64_t h = mix64(base ^ 0x5eed5eed5eed5eedULL);
  h = mix64(h ^ (split == Split::kTrain ? 0x7261696eULL : 0x6576616cULL));
  h = mix64(h ^ index);
  return mix64(h ^ (attempt * 0x9e3779b97f4a7c15ULL));
}

Problem draw_problem(const Task& task, uint64_t base, Split split, uint64_t index) {
  for (int attempt = 0; attempt < kMaxSplitAttempts; ++attempt) {
    Problem p = task.generate(problem_seed(base, split, index, attempt));
    if (split_of(p.prompt) == split) return p;
  }
  throw InputError("task '" + task.name() + "' gave no " + std::string(split_name(split)) +
                   "-split prompt in " + std::to_string(kMaxSplitAttempts) +
                   " draws; it has too few distinct prompts to split");
}

}  // namespace streamrl::tasks
