// The long-context retrieval task: the answer is the queried key's value in the context (parsed
// here independently), keys are distinct, and context lengths have the promised heavy tail.
#include "streamrl/tasks/builtin/retrieve_task.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

namespace streamrl::tasks {
namespace {

TEST(RetrieveTask, TheAnswerIsTheQueriedKeysValue) {
  const RetrieveTask task;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const Problem p = task.generate(seed);
    const size_t q = p.prompt.rfind('?');
    ASSERT_NE(q, std::string::npos);
    const std::string asked = p.prompt.substr(q + 1, p.prompt.size() - q - 2);
    std::map<std::string, std::string> records;
    size_t begin = 0;
    for (size_t end; (end = p.prompt.find(';', begin)) != std::string::npos; begin = end + 1) {
      const std::string rec = p.prompt.substr(begin, end - begin);
      ASSERT_EQ(rec.size(), 6u) << rec;
      ASSERT_EQ(rec[3], '=') << rec;
      ASSERT_TRUE(
          std::all_of(rec.begin(), rec.begin() + 3, [](char c) { return c >= 'a' && c <= 'z'; }));
      ASSERT_TRUE(records.emplace(rec.substr(0, 3), rec.substr(4)).second)
          << "repeated key " << rec;
    }
    ASSERT_EQ(static_cast<int>(records.size()), p.visible_size);
    ASSERT_TRUE(records.count(asked)) << asked;
    EXPECT_EQ(records[asked], p.reference);
    EXPECT_EQ(task.verify(p, "#" + records[asked]), 1.0);
  }
}

TEST(RetrieveTask, ContextLengthsAreHeavyTailed) {
  const RetrieveTask task;
  std::vector<size_t> chars;
  std::set<int> difficulties;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    const Problem p = task.generate(1'000'000 + seed);
    chars.push_back(p.prompt.size());
    difficulties.insert(p.difficulty);
  }
  std::sort(chars.begin(), chars.end());
  const size_t median = chars[chars.size() / 2];
  const double over_4k =
      static_cast<double>(chars.end() - std::upper_bound(chars.begin(), chars.end(), 4096)) /
      chars.size();
  EXPECT_GT(median, 1500u);
  EXPECT_LT(median, 3000u);
  EXPECT_GT(over_4k, 0.15);
  EXPECT_LT(over_4k, 0.45);
  EXPECT_GE(chars.front(), 7u * kRetrieveMinRecords);
  EXPECT_GT(chars.back(), 12000u);
  EXPECT_LE(chars.back(), 7u * kRetrieveMaxRecords + 5);
  EXPECT_EQ(difficulties, (std::set<int>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace streamrl::tasks
