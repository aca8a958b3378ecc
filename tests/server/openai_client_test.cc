// The official openai Node client (tests/server/openai_client/check.mjs) against `streamrl serve`
// on a tiny checkpoint with a chat template: completions and chat completions, plain and
// streamed. Skipped with a message when node or the npm package is missing
// (scripts/setup_openai_client installs it).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "../tiny_model.h"
#include "run_binary.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl {
namespace {

namespace fs = std::filesystem;

const fs::path kClientDir = fs::path(__FILE__).parent_path() / "openai_client";

// Output and exit status of a shell command.
std::pair<std::string, int> shell(const std::string& command) {
  std::string out;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return {"popen failed", -1};
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  return {out, pclose(p)};
}

TEST(OpenAiNodeClient, UsualCallsWork) {
  if (shell("node --version").second != 0) GTEST_SKIP() << "node is not installed";
  if (!fs::exists(kClientDir / "node_modules" / "openai" / "package.json")) {
    GTEST_SKIP() << "the openai npm package is not installed (run scripts/setup_openai_client)";
  }
  const std::string dir = testing_util::fresh_temp_dir("openai_client");
  const std::string ckpt = dir + "/tiny-chat";
  model::CausalLM lm = testing_util::tiny_model(5, 100, 512);
  // A chat template that renders "role: content<eos>" lines, then the assistant's header.
  const nlohmann::json tokenizer_config = {
      {"eos_token", "<eos>"},
      {"bos_token", "<bos>"},
      {"chat_template",
       "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{{ eos_token }}\n{% endfor %}"
       "{% if add_generation_prompt %}assistant: {% endif %}"}};
  model::save_checkpoint(ckpt, lm, tokenizer::make_tokenizer("char")->to_json(),
                         {{"tokenizer_config.json", tokenizer_config.dump(2)}});
  testing_util::ServeProcess serve(ckpt);
  const std::string url = serve.wait_for_url();
  ASSERT_FALSE(url.empty()) << "serve did not start";
  auto [out, status] =
      shell("timeout 120 node " + (kClientDir / "check.mjs").string() + " " + url + "/v1");
  ASSERT_EQ(status, 0) << out;
  const auto j = nlohmann::json::parse(testing_util::last_line(out), nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["model"], "tiny-chat");
  EXPECT_GT(j["completion_events"].get<int>(), 1);
  EXPECT_GT(j["chat_events"].get<int>(), 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace streamrl
