// JSONL datasets: fields, blank lines, and one "file:line: reason" error per malformed record.
#include "streamrl/tasks/dataset.h"

#include <gtest/gtest.h>

#include <fstream>

#include "streamrl/core/errors.h"

namespace streamrl::tasks {
namespace {

namespace fs = std::filesystem;

class Jsonl : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) /
           ("tasks_jsonl_" +
            std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& text) {
    const fs::path path = dir_ / "data.jsonl";
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // The InputError message of loading `text` with `verifier`, or "" when it loads.
  std::string error_of(const std::string& text, std::string_view verifier = "exact") {
    const fs::path path = write(text);
    try {
      load_jsonl(path, get_verifier(verifier));
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }

  std::string at(int line) const {
    return (dir_ / "data.jsonl").string() + ":" + std::to_string(line) + ": ";
  }

  fs::path dir_;
};

TEST_F(Jsonl, LoadsRecordsSkippingBlankLines) {
  const fs::path path = write(
      "{\"prompt\": \"2+2=\", \"answer\": \"4\", \"source\": \"ignored\"}\n"
      "\n"
      "   \r\n"
      "{\"prompt\": \"6*7=\", \"answer\": 42, \"difficulty\": 3, \"demonstration\": \"#42\"}\r\n"
      "{\"answer\": \"x\", \"prompt\": \"say x\"}");
  const std::vector<Problem> problems = load_jsonl(path, get_verifier("exact"));
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[0].prompt, "2+2=");
  EXPECT_EQ(problems[0].reference, "4");
  EXPECT_EQ(problems[0].demonstration, "");
  EXPECT_EQ(problems[0].difficulty, 0);
  EXPECT_EQ(problems[1].reference, "42");
  EXPECT_EQ(problems[1].difficulty, 3);
  EXPECT_EQ(problems[1].demonstration, "#42");
  EXPECT_EQ(problems[2].prompt, "say x");
  for (size_t i = 0; i < problems.size(); ++i) EXPECT_EQ(problems[i].seed, i);
}

TEST_F(Jsonl, ByteOrderMarkIsSkipped) {
  EXPECT_EQ(error_of("\xEF\xBB\xBF{\"prompt\": \"p\", \"answer\": \"a\"}\n"), "");
}

TEST_F(Jsonl, BadJsonNamesFileAndLine) {
  const std::string e = error_of(
      "{\"prompt\": \"a\", \"answer\": \"1\"}\n"
      "\n"
      "{\"prompt\": \"b\", \"answer\": }\n");
  EXPECT_EQ(e.rfind(at(3) + "invalid JSON", 0), 0u) << e;
  EXPECT_EQ(e.find("json.exception"), std::string::npos) << e;
}

TEST_F(Jsonl, MissingOrMistypedFieldsAreNamed) {
  EXPECT_EQ(error_of("{\"answer\": \"1\"}"),
            at(1) + "missing field \"prompt\" (or chat \"messages\")");
  EXPECT_EQ(error_of("{\"prompt\": \"p\"}"), at(1) + "missing field \"answer\"");
  EXPECT_EQ(error_of("{\"prompt\": 3, \"answer\": \"1\"}"), at(1) + "\"prompt\" must be a string");
  EXPECT_EQ(error_of("{\"prompt\": \"\", \"answer\": \"1\"}"), at(1) + "\"prompt\" is empty");
  EXPECT_EQ(error_of("{\"prompt\": \"p\", \"answer\": true}"),
            at(1) + "\"answer\" must be a string or a number");
  EXPECT_EQ(error_of("{\"prompt\": \"p\", \"answer\": null}"),
            at(1) + "\"answer\" must be a string or a number");
  EXPECT_EQ(error_of("{\"prompt\": \"p\", \"answer\": \"1\", \"demonstration\": [1]}"),
            at(1) + "\"demonstration\" must be a string");
  EXPECT_NE(
      error_of("{\"prompt\": \"p\", \"answer\": \"1\", \"difficulty\": -1}").find("difficulty"),
      std::string::npos);
  EXPECT_NE(
      error_of("{\"prompt\": \"p\", \"answer\": \"1\", \"difficulty\": 1.5}").find("difficulty"),
      std::string::npos);
  EXPECT_EQ(error_of("[\"p\", \"1\"]"), at(1) + "expected a JSON object");
}

TEST_F(Jsonl, ChatRecordsKeepMessagesAndTakeAFinalAssistantTurnAsDemonstration) {
  const fs::path path = write(
      "{\"prompt\": \"plain\", \"answer\": \"1\"}\n"
      "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
      "{\"role\": \"user\", \"content\": \"6*7?\"}], \"answer\": 42}\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"1+1?\"}, "
      "{\"role\": \"assistant\", \"content\": \"#2\"}], \"answer\": \"2\", \"difficulty\": 1}\n");
  const std::vector<Problem> problems = load_jsonl(path, get_verifier("numeric"));
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_TRUE(problems[0].messages.empty());
  EXPECT_EQ(problems[0].source, path.string() + ":1");
  const std::vector<tokenizer::ChatMessage> conversation = {{"system", "Be brief."},
                                                            {"user", "6*7?"}};
  EXPECT_EQ(problems[1].messages, conversation);
  EXPECT_EQ(problems[1].reference, "42");
  EXPECT_EQ(problems[1].demonstration, "");
  EXPECT_EQ(problems[1].source, path.string() + ":2");
  // The conversation's JSON is its identity: distinct conversations get distinct prompts.
  EXPECT_EQ(problems[1].prompt,
            R"([{"content":"Be brief.","role":"system"},{"content":"6*7?","role":"user"}])");
  EXPECT_EQ(problems[2].messages, (std::vector<tokenizer::ChatMessage>{{"user", "1+1?"}}));
  EXPECT_EQ(problems[2].demonstration, "#2");
  EXPECT_EQ(problems[2].difficulty, 1);

  const JsonlTask task(path, "numeric");
  ASSERT_NE(task.first_chat_problem(), nullptr);
  EXPECT_EQ(task.first_chat_problem()->source, path.string() + ":2");
  EXPECT_EQ(
      JsonlTask(write("{\"prompt\": \"p\", \"answer\": 1}\n"), "numeric").first_chat_problem(),
      nullptr);
}

TEST_F(Jsonl, MalformedChatRecordsAreOneLineErrors) {
  const std::string user = "{\"role\": \"user\", \"content\": \"hi\"}";
  const std::string assistant = "{\"role\": \"assistant\", \"content\": \"yo\"}";
  EXPECT_EQ(error_of("{\"messages\": [" + user + "], \"prompt\": \"p\", \"answer\": 1}"),
            at(1) + "give either \"prompt\" or \"messages\", not both");
  EXPECT_EQ(error_of("{\"messages\": {}, \"answer\": 1}"), at(1) + "messages must be a JSON array");
  EXPECT_EQ(
      error_of("{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}], \"answer\": 1}"),
      at(1) + "message 0 has unsupported role 'robot' (supported: system, user, assistant, tool)");
  EXPECT_EQ(error_of("{\"messages\": [{\"role\": \"user\"}], \"answer\": 1}"),
            at(1) + "message 0 needs a string \"content\"");
  const std::string must_end =
      "\"messages\" must end with a user message (optionally followed by the assistant's answer)";
  EXPECT_EQ(error_of("{\"messages\": [], \"answer\": 1}"), at(1) + must_end);
  EXPECT_EQ(error_of("{\"messages\": [" + assistant + "], \"answer\": 1}"), at(1) + must_end);
  EXPECT_EQ(
      error_of("{\"messages\": [" + user + "," + assistant + "," + assistant + "], \"answer\": 1}"),
      at(1) + must_end);
  EXPECT_EQ(error_of("{\"messages\": [" + user + "," + assistant +
                     "], \"demonstration\": \"d\", \"answer\": 1}"),
            at(1) +
                "give the demonstration either as a final assistant message or as "
                "\"demonstration\", not both");
  EXPECT_EQ(error_of("{\"messages\": [" + user + "]}"), at(1) + "missing field \"answer\"");
}

TEST_F(Jsonl, AnswersMustSuitTheVerifier) {
  EXPECT_EQ(
      error_of("{\"prompt\": \"p\", \"answer\": \"7\"}\n{\"prompt\": \"q\", \"answer\": \"seven\"}",
               "numeric"),
      at(2) + "answer has no number for the numeric verifier");
  EXPECT_NE(error_of("{\"prompt\": \"p\", \"answer\": \"F\"}", "choice").find(at(1)),
            std::string::npos);
  EXPECT_EQ(error_of("{\"prompt\": \"p\", \"answer\": \"(C)\"}", "choice"), "");
}

TEST_F(Jsonl, EmptyOrMissingFilesAreInputErrors) {
  EXPECT_NE(error_of("").find("no records"), std::string::npos);
  EXPECT_NE(error_of("\n  \n\n").find("no records"), std::string::npos);
  EXPECT_THROW(load_jsonl(dir_ / "absent.jsonl", get_verifier("exact")), InputError);
}

TEST_F(Jsonl, JsonlTaskServesRecordsAndScoresWithItsVerifier) {
  const fs::path path = write(
      "{\"prompt\": \"What is 6*7?\", \"answer\": \"42\"}\n"
      "{\"prompt\": \"What is 1000+234?\", \"answer\": \"1234\"}\n");
  const JsonlTask task(path, "numeric");
  EXPECT_EQ(task.name(), path.string());
  EXPECT_NE(task.description().find("2 records"), std::string::npos);
  ASSERT_EQ(task.size(), 2u);
  EXPECT_EQ(task.problem(1).prompt, "What is 1000+234?");
  EXPECT_EQ(task.generate(3).prompt, task.problem(1).prompt);
  EXPECT_EQ(task.generate(3).seed, 1u);
  EXPECT_EQ(task.verify(task.problem(1), "It is 1,234."), 1.0);
  EXPECT_EQ(task.verify(task.problem(0), "It is 41."), 0.0);
  EXPECT_THROW(JsonlTask(path, "fuzzy"), InputError);
}

}  // namespace
}  // namespace streamrl::tasks
