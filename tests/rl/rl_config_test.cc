// Reading the RL algorithm section: defaults, every key, and one-line errors naming the key.
#include "streamrl/rl/rl_config.h"

#include <gtest/gtest.h>

#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"
#include "streamrl/rl/pipeline_trainer.h"
#include "streamrl/rl/rl_roles.h"

namespace streamrl::rl {
namespace {

struct Read {
  AdvantageOptions adv;
  RlLossConfig loss;
};

// The algorithm section with every sub-section present; tests change it through Hydra-style
// overrides ("rl.clip.eps_low=0.1"), the way users do on the command line.
constexpr const char* kBase = "rl: {adv: {}, clip: {}, kl: {}, tis: {}}\n";

Read read(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  core::Config root = core::Config::from_string(yaml, overrides);
  Read r;
  core::Config section = root.section("rl");
  r.adv.read(section);
  r.loss.read(section);
  root.check_all_used();
  return r;
}

// The message of the InputError that reading kBase with `overrides` throws ("" if none).
std::string error_of(const std::vector<std::string>& overrides) {
  try {
    read(kBase, overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// sgs.urls with several trainer ranks: URL i streams to rank i % world, so instances listed host by
// host in rank order stay with the rank on their host.
TEST(RlRoles, EachRankStreamsFromItsShareOfTheUrls) {
  const std::vector<std::string> urls = {"http://a:1", "http://b:1", "http://a:2", "http://b:2"};
  EXPECT_EQ(urls_of_rank(urls, 0, 1), urls);
  EXPECT_EQ(urls_of_rank(urls, 0, 2), (std::vector<std::string>{"http://a:1", "http://a:2"}));
  EXPECT_EQ(urls_of_rank(urls, 1, 2), (std::vector<std::string>{"http://b:1", "http://b:2"}));
  EXPECT_EQ(urls_of_rank(urls, 3, 4), (std::vector<std::string>{"http://b:2"}));
  EXPECT_TRUE(urls_of_rank({}, 1, 2).empty());  // local instances on every rank
  try {
    urls_of_rank({"http://a:1"}, 0, 2);
    ADD_FAILURE() << "one URL for two ranks was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sgs.urls lists 1 instance(s) for 2 trainer ranks"),
              std::string::npos)
        << e.what();
  }
}

TEST(RlConfig, Defaults) {
  const Read r = read(kBase);
  EXPECT_TRUE(r.adv.norm_by_std);
  EXPECT_FALSE(r.adv.leave_one_out);
  EXPECT_DOUBLE_EQ(r.adv.epsilon, 1e-6);
  EXPECT_DOUBLE_EQ(r.loss.clip.eps_low, 0.2);
  EXPECT_DOUBLE_EQ(r.loss.clip.eps_high, 0.2);
  EXPECT_DOUBLE_EQ(r.loss.clip.dual_clip_c, 0.0);
  EXPECT_DOUBLE_EQ(r.loss.kl.coef, 0.0);
  EXPECT_EQ(r.loss.kl.estimator, KlEstimator::kK3);
  EXPECT_EQ(r.loss.kl.placement, KlPlacement::kLoss);
  EXPECT_DOUBLE_EQ(r.loss.entropy_coef, 0.0);
  EXPECT_EQ(r.loss.loss_agg, LossAggMode::kTokenMean);
  EXPECT_FALSE(r.loss.tis.enabled);
  EXPECT_DOUBLE_EQ(r.loss.tis.lo, 0.5);
  EXPECT_DOUBLE_EQ(r.loss.tis.hi, 5.0);
  EXPECT_EQ(r.loss.tis.mode, TisMode::kTruncate);
}

TEST(RlConfig, ReadsEveryKeyAndRecordsDefaults) {
  const std::string yaml = R"(
rl:
  adv: {norm_by_std: false, leave_one_out: true, epsilon: 1.0e-4}
  clip: {eps_low: 0.1, eps_high: 0.28, dual_clip_c: 3}
  kl: {coef: 0.001, estimator: k3+, placement: loss}
  entropy_coef: 0.01
  loss_agg: seq-mean-token-sum-norm
  loss_agg_t_const: 512
  tis: {enabled: true, lo: 0.2, hi: 3, mode: mask}
)";
  const Read r = read(yaml);
  EXPECT_FALSE(r.adv.norm_by_std);
  EXPECT_TRUE(r.adv.leave_one_out);
  EXPECT_DOUBLE_EQ(r.adv.epsilon, 1e-4);
  EXPECT_DOUBLE_EQ(r.loss.clip.eps_low, 0.1);
  EXPECT_DOUBLE_EQ(r.loss.clip.eps_high, 0.28);
  EXPECT_DOUBLE_EQ(r.loss.clip.dual_clip_c, 3);
  EXPECT_DOUBLE_EQ(r.loss.kl.coef, 0.001);
  EXPECT_EQ(r.loss.kl.estimator, KlEstimator::kK3Plus);
  EXPECT_DOUBLE_EQ(r.loss.entropy_coef, 0.01);
  EXPECT_EQ(r.loss.loss_agg, LossAggMode::kSeqMeanTokenSumNorm);
  EXPECT_DOUBLE_EQ(r.loss.loss_agg_t_const, 512);
  EXPECT_TRUE(r.loss.tis.enabled);
  EXPECT_EQ(r.loss.tis.mode, TisMode::kMask);

  core::Config root = core::Config::from_string(kBase);
  RlLossConfig c;
  c.read(root.section("rl"));
  EXPECT_NE(root.resolved_yaml().find("estimator: k3"), std::string::npos);
  EXPECT_NE(root.resolved_yaml().find("loss_agg: token-mean"), std::string::npos);
}

TEST(RlConfig, BadValuesNameTheKey) {
  EXPECT_NE(error_of({"rl.adv.epsilon=-1"}).find("'rl.adv.epsilon'"), std::string::npos);
  EXPECT_NE(error_of({"rl.clip.eps_low=-0.1"}).find("'rl.clip.eps_low' must be in [0, 1)"),
            std::string::npos);
  EXPECT_NE(error_of({"rl.clip.eps_low=1"}).find("'rl.clip.eps_low'"), std::string::npos);
  EXPECT_NE(error_of({"rl.clip.eps_high=-1"}).find("'rl.clip.eps_high'"), std::string::npos);
  for (const char* c : {"0.5", "1", "-2"}) {
    EXPECT_NE(error_of({std::string("rl.clip.dual_clip_c=") + c})
                  .find("'rl.clip.dual_clip_c' must be 0 (off) or > 1"),
              std::string::npos)
        << c;
  }
  EXPECT_NE(error_of({"rl.kl.coef=-0.1"}).find("'rl.kl.coef'"), std::string::npos);
  EXPECT_NE(error_of({"rl.kl.estimator=k4"})
                .find("'rl.kl.estimator' must be one of k1, k2, k3, abs, k3+, got 'k4'"),
            std::string::npos);
  EXPECT_NE(error_of({"rl.kl.placement=advantage"}).find("'rl.kl.placement'"), std::string::npos);
  EXPECT_NE(error_of({"rl.kl.placement=reward", "rl.kl.estimator=k3"}).find("'rl.kl.estimator'"),
            std::string::npos);
  EXPECT_EQ(error_of({"rl.kl.placement=reward", "rl.kl.coef=0.01"}), "");
  EXPECT_EQ(error_of({"rl.kl.placement=reward", "rl.kl.estimator=k1"}), "");
  EXPECT_NE(error_of({"rl.entropy_coef=-1"}).find("'rl.entropy_coef'"), std::string::npos);
  EXPECT_NE(error_of({"rl.loss_agg=mean"}).find("'rl.loss_agg' must be one of token-mean"),
            std::string::npos);
  EXPECT_NE(error_of({"rl.loss_agg=seq-mean-token-sum-norm"}).find("'rl.loss_agg_t_const'"),
            std::string::npos);
  EXPECT_NE(error_of({"rl.tis.lo=2", "rl.tis.hi=1"}).find("'rl.tis.hi' must be > tis.lo (2)"),
            std::string::npos);
  EXPECT_NE(error_of({"rl.tis.lo=-1"}).find("'rl.tis.lo'"), std::string::npos);
  EXPECT_NE(error_of({"rl.tis.mode=drop"}).find("'rl.tis.mode'"), std::string::npos);
  EXPECT_NE(error_of({"rl.clip.eps_high=.nan"}).find("'rl.clip.eps_high'"), std::string::npos);
  const std::string message = error_of({"rl.clip.eps_low=-0.1"});
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

// The `parallel` section: pipeline passes per step (parallel.pp_waves) in train, not in sft.
TEST(ParallelConfig, ReadsPipelineWavesForTrainAndRejectsBadOnes) {
  const auto parallel = [](const std::string& override, bool train = true) {
    core::Config root = core::Config::from_string("parallel: {}\n", {override});
    ParallelConfig c;
    c.read(root.section("parallel"), train);
    root.check_all_used();
    return c;
  };
  EXPECT_THROW(parallel("parallel.pp_waves=2", /*train=*/false), InputError);
  EXPECT_EQ(ParallelConfig{}.waves, 1);
  EXPECT_EQ(parallel("parallel.pp_waves=4").waves, 4);
  try {
    parallel("parallel.pp_waves=0");
    ADD_FAILURE() << "parallel.pp_waves=0 was accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "parallel.pp_waves must be >= 1, got 0");
  }
}

TEST(RlConfig, EnumSpellingsRoundTrip) {
  for (KlEstimator e : {KlEstimator::kK1, KlEstimator::kK2, KlEstimator::kK3, KlEstimator::kAbs,
                        KlEstimator::kK3Plus}) {
    EXPECT_EQ(parse_kl_estimator(name(e)), e);
  }
  for (LossAggMode m : {LossAggMode::kTokenMean, LossAggMode::kSeqMeanTokenMean,
                        LossAggMode::kSeqMeanTokenSumNorm}) {
    EXPECT_EQ(parse_loss_agg_mode(name(m)), m);
  }
  EXPECT_EQ(parse_kl_placement(name(KlPlacement::kReward)), KlPlacement::kReward);
  EXPECT_EQ(parse_tis_mode(name(TisMode::kMask)), TisMode::kMask);
  EXPECT_EQ(parse_kl_estimator("low_var_kl"), std::nullopt);
}

// The dedicated modes generate through the SGS, whose instances get sgs.max_batch_size slots, never
// more than the engine's rollout.max_batch_size: a smaller rollout batch must not make the run
// fail. The colocated engine has no SGS and runs rollout.max_batch_size.
TEST(RlRunConfig, GenerationBatchIsTheSmallerOfTheTwoKeysBesideAnSgs) {
  auto batch = [](const std::string& yaml, const std::string& mode = "disagg") {
    const std::string policy = "policy: {init_from: runs/sft_sum/final}\nmode: " + mode + "\n";
    return RlRunConfig::from_config(core::Config::from_string(policy + yaml)).generation_batch();
  };
  EXPECT_EQ(batch("rollout: {max_batch_size: 128}\nsgs: {max_batch_size: 64}\n"), 64);
  EXPECT_EQ(batch("rollout: {max_batch_size: 32}\nsgs: {max_batch_size: 64}\n"), 32);
  EXPECT_EQ(batch("rollout: {max_batch_size: 128}\nsgs: {max_batch_size: 128}\n"), 128);
  EXPECT_EQ(batch("rollout: {max_batch_size: 128}\nsgs: {max_batch_size: 64}\n", "async"), 64);
  EXPECT_EQ(batch("rollout: {max_batch_size: 128}\nsgs: {max_batch_size: 64}\n", "colocate"), 128);
}

}  // namespace
}  // namespace streamrl::rl
