// User datasets as JSONL: one {"prompt": ..., "answer": ...} or chat
// {"messages": [...], "answer": ...} object per line, scored by a named verifier (verifiers.h). The
// whole file is loaded and checked up front, so a bad line stops a run before training starts, not
// hours into it.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "streamrl/tasks/task.h"
#include "streamrl/tasks/verifiers.h"

namespace streamrl::tasks {

// The records of `path`, one Problem per non-blank line, in file order; Problem::seed is the
// record's index. Fields: "prompt" (non-empty string) and "answer" (string or number) are
// required; "demonstration" (string, the SFT target) and "difficulty" (integer >= 0) are used when
// present; other fields are ignored. Every answer must be usable by `verifier`.
// A chat record gives "messages" (OpenAI-style [{"role", "content"}], roles system/user/assistant)
// in place of "prompt": the conversation must end with a user message, optionally followed by one
// assistant message, which is then the demonstration. Such a Problem keeps the messages (see
// Problem::prompt); Problem::source is "PATH:LINE" for every record.
// Throws InputError "PATH:LINE: reason" for a malformed line, "PATH: ..." for a missing or empty
// file.
std::vector<Problem> load_jsonl(const std::filesystem::path& path, const Verifier& verifier);

// A dataset used where a Task is expected. Immutable after construction, hence thread-safe.
class JsonlTask final : public Task {
 public:
  // Loads `path` now (see load_jsonl); an unknown verifier name is an InputError too.
  JsonlTask(const std::filesystem::path& path, std::string_view verifier_name);

  std::string name() const override;  // the path, as given
  std::string description() const override;
  // Record seed % size(): any seed stream visits the records uniformly.
  Problem generate(uint64_t seed) const override;
  double verify(const Problem& problem, std::string_view completion) const override;

  size_t size() const { return problems_.size(); }
  // The first chat record, or null when every record is a plain prompt: the record a missing chat
  // template would fail on, checked before a run starts.
  const Problem* first_chat_problem() const;
  // REQUIRES index < size().
  const Problem& problem(size_t index) const { return problems_[index]; }

 private:
  std::string path_;
  const Verifier* verifier_;
  std::vector<Problem> problems_;
};

}  // namespace streamrl::tasks
