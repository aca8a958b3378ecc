// JSONL loading with one "file:line: reason" error per malformed record.
#include "streamrl/tasks/dataset.h"

#include <nlohmann/json.hpp>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::tasks {
namespace {

using nlohmann::json;

bool is_blank(std::string_view line) { return trim(line).empty(); }

// nlohmann's messages open with "[json.exception.parse_error.101] "; the tag helps nobody here.
std::string parse_reason(const json::parse_error& e) {
  std::string what = e.what();
  const size_t tag_end = what.find("] ");
  return tag_end == std::string::npos ? what : what.substr(tag_end + 2);
}

// "messages" of a chat record: the conversation the policy answers, and a final assistant turn,
// when there is one, as the demonstration.
void parse_chat(const json& record, const std::string& at, Problem* p) {
  const std::string where = at + ": ";
  std::vector<tokenizer::ChatMessage> messages = tokenizer::parse_messages(record["messages"], at);
  if (!messages.empty() && messages.back().role == "assistant") {
    if (record.contains("demonstration")) {
      throw InputError(where +
                       "give the demonstration either as a final assistant message or as "
                       "\"demonstration\", not both");
    }
    p->demonstration = std::move(messages.back().content);
    messages.pop_back();
  }
  if (messages.empty() || messages.back().role != "user") {
    throw InputError(where +
                     "\"messages\" must end with a user message (optionally followed by the "
                     "assistant's answer)");
  }
  json conversation = json::array();
  for (const auto& m : messages) conversation.push_back({{"role", m.role}, {"content", m.content}});
  p->prompt = conversation.dump();
  p->messages = std::move(messages);
}

Problem parse_record(std::string_view line, const Verifier& verifier, const std::string& at) {
  const std::string where = at + ": ";
  json record;
  try {
    record = json::parse(line);
  } catch (const json::parse_error& e) {
    throw InputError(where + "invalid JSON: " + parse_reason(e));
  }
  if (!record.is_object()) throw InputError(where + "expected a JSON object");

  Problem p;
  p.source = at;
  if (record.contains("messages")) {
    if (record.contains("prompt")) {
      throw InputError(where + "give either \"prompt\" or \"messages\", not both");
    }
    parse_chat(record, at, &p);
  } else {
    if (!record.contains("prompt")) {
      throw InputError(where + "missing field \"prompt\" (or chat \"messages\")");
    }
    if (!record["prompt"].is_string()) throw InputError(where + "\"prompt\" must be a string");
    p.prompt = record["prompt"].get<std::string>();
    if (p.prompt.empty()) throw InputError(where + "\"prompt\" is empty");
  }

  if (!record.contains("answer")) throw InputError(where + "missing field \"answer\"");
  const json& answer = record["answer"];
  if (answer.is_string()) {
    p.reference = answer.get<std::string>();
  } else if (answer.is_number()) {
    p.reference = answer.dump();
  } else {
    throw InputError(where + "\"answer\" must be a string or a number");
  }
  if (std::optional<std::string> error = verifier.reference_error(p.reference)) {
    throw InputError(where + *error);
  }

  if (record.contains("demonstration")) {
    if (!record["demonstration"].is_string()) {
      throw InputError(where + "\"demonstration\" must be a string");
    }
    p.demonstration = record["demonstration"].get<std::string>();
  }
  if (record.contains("difficulty")) {
    const json& d = record["difficulty"];
    if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > 1'000'000) {
      throw InputError(where + "\"difficulty\" must be an integer in [0, 1000000]");
    }
    p.difficulty = d.get<int>();
  }
  return p;
}

}  // namespace

std::vector<Problem> load_jsonl(const std::filesystem::path& path, const Verifier& verifier) {
  const std::string text = core::read_file(path);
  std::string_view rest = text;
  if (rest.starts_with("\xEF\xBB\xBF")) rest.remove_prefix(3);  // UTF-8 byte-order mark
  std::vector<Problem> problems;
  for (int line_number = 1; !rest.empty(); ++line_number) {
    const size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    if (is_blank(line)) continue;
    Problem p = parse_record(line, verifier, path.string() + ":" + std::to_string(line_number));
    p.seed = problems.size();
    problems.push_back(std::move(p));
  }
  if (problems.empty()) throw InputError(path.string() + ": no records (the file is empty)");
  return problems;
}

JsonlTask::JsonlTask(const std::filesystem::path& path, std::string_view verifier_name)
    : path_(path.string()), verifier_(&get_verifier(verifier_name)) {
  problems_ = load_jsonl(path, *verifier_);
}

std::string JsonlTask::name() const { return path_; }

std::string JsonlTask::description() const {
  return std::to_string(problems_.size()) + " records from " + path_ + ", verifier " +
         verifier_->name();
}

Problem JsonlTask::generate(uint64_t seed) const { return problems_[seed % problems_.size()]; }

const Problem* JsonlTask::first_chat_problem() const {
  for (const Problem& p : problems_) {
    if (!p.messages.empty()) return &p;
  }
  return nullptr;
}

double JsonlTask::verify(const Problem& problem, std::string_view completion) const {
  return verifier_->score(problem.reference, completion);
}

}  // namespace streamrl::tasks
