// The "retrieve" task: retrieval of a value by key from a heavy-tailed context.
#include "streamrl/tasks/builtin/retrieve_task.h"

#include <set>
#include <string>
#include <vector>

#include "streamrl/tasks/answer.h"
#include "streamrl/tasks/rng.h"

namespace streamrl::tasks {
namespace {

// Pareto(alpha 1.2, scale 300) over 64..2340 records: median about 300 records (2.1k
// characters), about 30 % over 4k characters, the longest 16k.
const std::vector<uint32_t>& record_count_weights() {
  static const std::vector<uint32_t> weights =
      pareto_weights(1.2, 300.0, kRetrieveMinRecords, kRetrieveMaxRecords);
  return weights;
}

}  // namespace

std::string RetrieveTask::name() const { return "retrieve"; }

std::string RetrieveTask::description() const {
  return "retrieve a value by key from 64-2340 records (count heavy-tailed, up to 16k "
         "characters): abc=42;xyz=17;?xyz= -> #17";
}

Problem RetrieveTask::generate(uint64_t seed) const {
  Rng rng(seed);
  const int n = kRetrieveMinRecords + static_cast<int>(rng.weighted(record_count_weights()));
  std::set<std::string> used;
  std::vector<std::string> keys;
  while (static_cast<int>(keys.size()) < n) {
    std::string key(3, 'a');
    for (char& c : key) c = static_cast<char>('a' + rng.uniform(0, 25));
    if (used.insert(key).second) keys.push_back(std::move(key));
  }
  const int asked = static_cast<int>(rng.uniform(0, n - 1));
  Problem p;
  for (int i = 0; i < n; ++i) {
    const std::string value = std::to_string(rng.uniform(10, 99));
    p.prompt += keys[i] + "=" + value + ";";
    if (i == asked) p.reference = value;
  }
  p.prompt += "?" + keys[asked] + "=";
  p.demonstration = kAnswerMarker + p.reference;
  // Buckets by context length: 64-127 records -> 0, 128-255 -> 1, ... 1024 and more -> 4.
  p.difficulty = difficulty_from_steps(n / kRetrieveMinRecords);
  p.visible_size = n;
  p.seed = seed;
  return p;
}

double RetrieveTask::verify(const Problem& problem, std::string_view completion) const {
  return score_marked_answer(problem.reference, completion);
}

}  // namespace streamrl::tasks
