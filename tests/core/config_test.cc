#include "streamrl/core/config.h"

#include <gtest/gtest.h>

namespace streamrl::core {
namespace {

TEST(Config, ReadsValuesAndKeepsDefaults) {
  Config cfg = Config::from_string("train:\n  lr: 0.5\n  steps: 3\n");
  Config train = cfg.section("train");
  double lr = 1.0;
  int steps = 0;
  int warmup = 7;
  train.get("lr", lr);
  train.get("steps", steps);
  train.get("warmup", warmup);
  EXPECT_DOUBLE_EQ(lr, 0.5);
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(warmup, 7);
  cfg.check_all_used();
  EXPECT_NE(cfg.resolved_yaml().find("warmup: 7"), std::string::npos);
}

TEST(Config, OverridesWinAndCreateKeys) {
  Config cfg = Config::from_string("a:\n  b: 1\n", {"a.b=2", "c.d=hello"});
  int b = 0;
  std::string d;
  cfg.section("a").get("b", b);
  cfg.section("c").get("d", d);
  EXPECT_EQ(b, 2);
  EXPECT_EQ(d, "hello");
  cfg.check_all_used();
}

TEST(Config, UnknownKeyIsAnErrorWithSuggestion) {
  Config cfg = Config::from_string("train:\n  lrr: 0.5\n");
  double lr = 1.0;
  cfg.section("train").get("lr", lr);
  try {
    cfg.check_all_used();
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("unknown config key 'train.lrr'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("did you mean 'train.lr'"), std::string::npos) << msg;
  }
}

TEST(Config, TypeErrorNamesTheKey) {
  Config cfg = Config::from_string("train:\n  steps: many\n");
  int steps = 0;
  try {
    cfg.section("train").get("steps", steps);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("train.steps"), std::string::npos);
  }
}

TEST(Config, MalformedYamlAndOverrides) {
  EXPECT_THROW(Config::from_string("a: [1, 2\n"), InputError);
  EXPECT_THROW(Config::from_string("a: 1\n", {"novalue"}), InputError);
  EXPECT_THROW(Config::from_string("- 1\n- 2\n"), InputError);
  EXPECT_THROW(Config::from_file("/nonexistent/streamrl.yaml"), InputError);
}

TEST(Config, AbsentSectionReadsDefaults) {
  Config cfg = Config::from_string("a: 1\n");
  int a = 0, b = 5;
  cfg.get("a", a);
  cfg.section("missing").section("deeper").get("b", b);
  EXPECT_EQ(b, 5);
  cfg.check_all_used();
}

TEST(Config, RequireReportsMissingKey) {
  Config cfg = Config::from_string("");
  EXPECT_THROW(cfg.require<int>("steps"), InputError);
}

}  // namespace
}  // namespace streamrl::core
