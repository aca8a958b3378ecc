#include "streamrl/dist/launcher.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "run_binary.h"
#include "streamrl/core/errors.h"

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
