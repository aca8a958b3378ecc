#include "streamrl/dist/launcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "run_binary.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/threads.h"

namespace streamrl::dist {
namespace {
namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Launcher, SetsTheEnvironmentAndWritesBothStreamsToTheLogFile) {
  const fs::path log = fs::path(testing_util::fresh_temp_dir("launcher_test")) / "launch.log";
  LaunchOptions o;
  o.nproc = 2;
  o.program = "/bin/sh";
  o.args = {"-c", "echo \"out $GREETING $RANK\"; echo \"err $EMPTY.\" >&2"};
  o.env = {"GREETING=hello=world", "EMPTY="};
  o.log_file = log.string();
  o.timeout_s = 30;
  EXPECT_EQ(launch_local(o), 0);
  const std::string text = read_all(log);
  EXPECT_NE(text.find("[rank 0] out hello=world 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 1] out hello=world 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 0] err .\n"), std::string::npos) << text;
  // Appended, not rewritten: a second launch keeps the first one's lines.
  o.nproc = 1;
  EXPECT_EQ(launch_local(o), 0);
  const std::string twice = read_all(log);
  EXPECT_NE(twice.find(text), std::string::npos);
  EXPECT_GT(twice.size(), text.size());
  fs::remove(log);
}

// Each rank gets its share of the cores (ranks that each took all of them oversubscribe the
// machine), unless the user chose; available_cores() honours the cap.
TEST(Launcher, GivesEachRankItsShareOfTheCores) {
  const fs::path log = fs::path(testing_util::fresh_temp_dir("launcher_test")) / "cores.log";
  LaunchOptions o;
  o.nproc = 2;
  o.program = "/bin/sh";
  o.args = {"-c", "echo \"cores $STREAMRL_CORES\""};
  o.log_file = log.string();
  o.timeout_s = 30;
  const char* outer = std::getenv(core::kCoresEnv);
  const std::string saved = outer ? outer : "";
  unsetenv(core::kCoresEnv);
  const int share = std::max(1, core::available_cores() / 2);
  EXPECT_EQ(launch_local(o), 0);
  EXPECT_NE(read_all(log).find("[rank 1] cores " + std::to_string(share) + "\n"), std::string::npos)
      << read_all(log);
  o.env = {"STREAMRL_CORES=7"};
  EXPECT_EQ(launch_local(o), 0);
  EXPECT_NE(read_all(log).find("[rank 1] cores 7\n"), std::string::npos) << read_all(log);

  setenv(core::kCoresEnv, "1", 1);
  EXPECT_EQ(core::available_cores(), 1);
  setenv(core::kCoresEnv, "not a number", 1);
  EXPECT_GE(core::available_cores(), 1);
  if (outer) {
    setenv(core::kCoresEnv, saved.c_str(), 1);
  } else {
    unsetenv(core::kCoresEnv);
  }
  fs::remove(log);
}

TEST(Launcher, RejectsAnEnvironmentEntryWithoutName) {
  LaunchOptions o;
  o.program = "/bin/true";
  o.env = {"NOVALUE"};
  EXPECT_THROW(launch_local(o), InputError);
  o.env = {"=x"};
  EXPECT_THROW(launch_local(o), InputError);
}

TEST(Launcher, UnwritableLogFileIsInputError) {
  LaunchOptions o;
  o.program = "/bin/true";
  o.log_file = "/nonexistent/dir/launch.log";
  EXPECT_THROW(launch_local(o), InputError);
}

}  // namespace
}  // namespace streamrl::dist
