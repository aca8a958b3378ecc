// The sgs: config section: defaults, overrides, and one-line errors for bad values.
#include "streamrl/sgs/sgs_config.h"

#include <gtest/gtest.h>

namespace streamrl::sgs {
namespace {

TEST(SgsConfig, DefaultsAndOverrides) {
  auto root = core::Config::from_string("sgs:\n  dispatch: random\n  ranker: {refit_every: 3}\n",
                                        {"sgs.alpha=0.1", "sgs.admission=lpt"});
  SgsConfig c = SgsConfig::read(root.section("sgs"));
  EXPECT_EQ(c.dispatch.policy, DispatchPolicy::kRandom);
  EXPECT_DOUBLE_EQ(c.dispatch.alpha, 0.1);
  ASSERT_TRUE(c.dispatch.admission.has_value());
  EXPECT_EQ(*c.dispatch.admission, engine::AdmissionPolicy::kLongestFirst);
  EXPECT_EQ(c.refit_every, 3);
  EXPECT_EQ(c.instances, 2);
  EXPECT_EQ(c.dispatch.objective, SplitObjective::kMax);
  root.check_all_used();

  SgsConfig d = SgsConfig::read(core::Config::from_string("").section("sgs"));
  EXPECT_EQ(d.dispatch.policy, DispatchPolicy::kSkewAware);
  EXPECT_EQ(d.dispatch.latency_model, LatencyModel::kReplay);
  EXPECT_TRUE(d.dispatch.auto_alpha);
  EXPECT_FALSE(c.dispatch.auto_alpha);
  EXPECT_FALSE(d.dispatch.admission.has_value());
}

TEST(SgsConfig, RejectsBadValues) {
  auto read = [](const std::string& yaml) {
    return SgsConfig::read(core::Config::from_string(yaml).section("sgs"));
  };
  EXPECT_THROW(read("sgs: {dispatch: fastest}"), InputError);
  EXPECT_THROW(read("sgs: {objective: min}"), InputError);
  EXPECT_THROW(read("sgs: {alpha: 2}"), InputError);
  EXPECT_THROW(read("sgs: {alpha: fast}"), InputError);
  EXPECT_THROW(read("sgs: {alpha: 0.2x}"), InputError);
  EXPECT_THROW(read("sgs: {latency_model: exact}"), InputError);
  EXPECT_THROW(read("sgs: {latency_model: eq2}"), InputError);  // alpha auto needs replay
  EXPECT_NO_THROW(read("sgs: {latency_model: eq2, alpha: 0.2}"));
  EXPECT_THROW(read("sgs: {instances: 0}"), InputError);
  EXPECT_THROW(read("sgs: {ranker: {heads: 3}}"), InputError);
  EXPECT_THROW(read("sgs: {admission: sometimes}"), InputError);
  auto root = core::Config::from_string("sgs: {alpah: 0.3}");
  SgsConfig::read(root.section("sgs"));
  EXPECT_THROW(root.check_all_used(), InputError);  // typo caught
}

}  // namespace
}  // namespace streamrl::sgs
