// docs/configuration.md against the code: every key `streamrl config --defaults` reports (the keys
// the config readers of sft, train and plan read, with their defaults) is documented with that
// default and a meaning, and every documented key exists in the code.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run_binary.h"

namespace streamrl {
namespace {
using testing_util::last_line;
using testing_util::run_streamrl;

struct DocRow {
  std::string default_value;
  std::string meaning;
};

// command -> key -> row, from the "## `streamrl COMMAND`" sections' tables of
// "| `key` | `default` | meaning |" rows.
std::map<std::string, std::map<std::string, DocRow>> read_reference(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::map<std::string, std::map<std::string, DocRow>> out;
  std::string command, line;
  auto code = [](std::string cell) {
    const size_t a = cell.find('`'), b = cell.rfind('`');
    return a != std::string::npos && b > a ? cell.substr(a + 1, b - a - 1) : std::string();
  };
  while (std::getline(in, line)) {
    if (line.rfind("## `streamrl ", 0) == 0) {
      command = line.substr(13, line.find('`', 13) - 13);
      continue;
    }
    if (command.empty() || line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) cells.push_back(cell);
    if (cells.size() < 3) continue;
    std::string meaning = cells[2];
    meaning.erase(0, meaning.find_first_not_of(' '));
    meaning.erase(meaning.find_last_not_of(' ') + 1);
    out[command][code(cells[0])] = {code(cells[1]), meaning};
  }
  return out;
}

TEST(ConfigReference, EveryKeyInTheCodeIsDocumentedAndViceVersa) {
  const auto r = run_streamrl({"config", "--defaults", "--json"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json code = nlohmann::json::parse(last_line(r.output));
  const auto doc =
      read_reference(std::string(STREAMRL_TEST_DATA_DIR) + "/../../docs/configuration.md");
  ASSERT_EQ(code.size(), 3u);
  for (const auto& [command, keys] : code.items()) {
    SCOPED_TRACE(command);
    ASSERT_TRUE(doc.count(command)) << "no section for streamrl " << command;
    const auto& rows = doc.at(command);
    EXPECT_GT(keys.size(), 5u);
    for (const auto& [key, value] : keys.items()) {
      auto it = rows.find(key);
      if (it == rows.end()) {
        ADD_FAILURE() << key << " (default " << value << ") is not in docs/configuration.md";
        continue;
      }
      EXPECT_EQ(it->second.default_value, value.get<std::string>()) << key;
      EXPECT_FALSE(it->second.meaning.empty()) << key << " has no meaning";
    }
    for (const auto& [key, row] : rows) {
      EXPECT_TRUE(keys.contains(key))
          << key << " is documented but no reader of " << command << " reads it";
    }
  }
}

TEST(ConfigReference, PlainOutputListsEveryCommand) {
  const auto r = run_streamrl({"config", "--defaults"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* c : {"# streamrl sft", "# streamrl train", "# streamrl plan"}) {
    EXPECT_NE(r.output.find(c), std::string::npos) << c;
  }
  EXPECT_NE(r.output.find("policy.init_from: (required)"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace streamrl
