// Reading and validating the RL algorithm section (rl_config.h).
#include "streamrl/rl/rl_config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>
#include <string>
#include <utility>

#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"

namespace streamrl::rl {
namespace {

constexpr std::array<std::pair<KlEstimator, std::string_view>, 5> kKlEstimatorNames{{
    {KlEstimator::kK1, "k1"},
    {KlEstimator::kK2, "k2"},
    {KlEstimator::kK3, "k3"},
    {KlEstimator::kAbs, "abs"},
    {KlEstimator::kK3Plus, "k3+"},
}};
constexpr std::array<std::pair<KlPlacement, std::string_view>, 2> kKlPlacementNames{{
    {KlPlacement::kLoss, "loss"},
    {KlPlacement::kReward, "reward"},
}};
constexpr std::array<std::pair<LossAggMode, std::string_view>, 3> kLossAggNames{{
    {LossAggMode::kTokenMean, "token-mean"},
    {LossAggMode::kSeqMeanTokenMean, "seq-mean-token-mean"},
    {LossAggMode::kSeqMeanTokenSumNorm, "seq-mean-token-sum-norm"},
}};
constexpr std::array<std::pair<PolicyRatio, std::string_view>, 2> kPolicyRatioNames{{
    {PolicyRatio::kToken, "token"},
    {PolicyRatio::kSequence, "sequence"},
}};
constexpr std::array<std::pair<TisMode, std::string_view>, 2> kTisModeNames{{
    {TisMode::kTruncate, "truncate"},
    {TisMode::kMask, "mask"},
}};

template <class E, size_t N>
std::string_view name_in(const std::array<std::pair<E, std::string_view>, N>& table, E value) {
  for (const auto& [e, text] : table) {
    if (e == value) return text;
  }
  return "?";
}

template <class E, size_t N>
std::optional<E> parse_in(const std::array<std::pair<E, std::string_view>, N>& table,
                          std::string_view text) {
  for (const auto& [e, spelling] : table) {
    if (spelling == text) return e;
  }
  return std::nullopt;
}

template <class E, size_t N>
std::string spellings(const std::array<std::pair<E, std::string_view>, N>& table) {
  std::string out;
  for (const auto& [e, text] : table) out += (out.empty() ? "" : ", ") + std::string(text);
  return out;
}

std::string format_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string full_key(const core::Config& c, std::string_view key) {
  return c.prefix().empty() ? std::string(key) : c.prefix() + "." + std::string(key);
}

[[noreturn]] void fail(const core::Config& c, std::string_view key, const std::string& what) {
  throw InputError("config key '" + full_key(c, key) + "' " + what);
}

void require_range(const core::Config& c, std::string_view key, double v, bool ok,
                   const std::string& range) {
  if (!ok || !std::isfinite(v)) fail(c, key, "must be " + range + ", got " + format_number(v));
}

// Reads the enum `key` of `c` spelled as in `table` into `value`.
template <class E, size_t N>
void get_enum(const core::Config& c, std::string_view key,
              const std::array<std::pair<E, std::string_view>, N>& table, E& value) {
  std::string text(name_in(table, value));
  c.get(key, text);
  std::optional<E> parsed = parse_in(table, text);
  if (!parsed) fail(c, key, "must be one of " + spellings(table) + ", got '" + text + "'");
  value = *parsed;
}

}  // namespace

std::string_view name(KlEstimator estimator) { return name_in(kKlEstimatorNames, estimator); }
std::string_view name(KlPlacement placement) { return name_in(kKlPlacementNames, placement); }
std::string_view name(LossAggMode mode) { return name_in(kLossAggNames, mode); }
std::string_view name(TisMode mode) { return name_in(kTisModeNames, mode); }
std::string_view name(PolicyRatio ratio) { return name_in(kPolicyRatioNames, ratio); }

std::optional<KlEstimator> parse_kl_estimator(std::string_view text) {
  return parse_in(kKlEstimatorNames, text);
}
std::optional<KlPlacement> parse_kl_placement(std::string_view text) {
  return parse_in(kKlPlacementNames, text);
}
std::optional<LossAggMode> parse_loss_agg_mode(std::string_view text) {
  return parse_in(kLossAggNames, text);
}
std::optional<TisMode> parse_tis_mode(std::string_view text) {
  return parse_in(kTisModeNames, text);
}

void AdvantageOptions::read(const core::Config& section) {
  core::Config c = section.section("adv");
  c.get("norm_by_std", norm_by_std);
  c.get("leave_one_out", leave_one_out);
  c.get("epsilon", epsilon);
  require_range(c, "epsilon", epsilon, epsilon >= 0, ">= 0");
}

void OverlongOptions::read(const core::Config& section) {
  core::Config c = section.section("overlong");
  c.get("buffer", buffer);
  c.get("penalty", penalty);
  c.get("filter", filter);
  require_range(c, "buffer", buffer, buffer >= 0, ">= 0");
  require_range(c, "penalty", penalty, penalty >= 0, ">= 0");
}

double overlong_penalty(int length, int max_new_tokens, const OverlongOptions& o) {
  if (o.buffer <= 0) return 0.0;
  const int start = max_new_tokens - o.buffer;
  if (length <= start) return 0.0;
  return o.penalty * std::min(1.0, static_cast<double>(length - start) / o.buffer);
}

void RlLossConfig::read(const core::Config& section) {
  core::Config clip_c = section.section("clip");
  clip_c.get("eps_low", clip.eps_low);
  clip_c.get("eps_high", clip.eps_high);
  clip_c.get("dual_clip_c", clip.dual_clip_c);
  require_range(clip_c, "eps_low", clip.eps_low, clip.eps_low >= 0 && clip.eps_low < 1,
                "in [0, 1)");
  require_range(clip_c, "eps_high", clip.eps_high, clip.eps_high >= 0, ">= 0");
  require_range(clip_c, "dual_clip_c", clip.dual_clip_c,
                clip.dual_clip_c == 0 || clip.dual_clip_c > 1, "0 (off) or > 1");

  core::Config kl_c = section.section("kl");
  kl_c.get("coef", kl.coef);
  get_enum(kl_c, "estimator", kKlEstimatorNames, kl.estimator);
  get_enum(kl_c, "placement", kKlPlacementNames, kl.placement);
  require_range(kl_c, "coef", kl.coef, kl.coef >= 0, ">= 0");
  // The reward placement is defined with k1 (spec §3.2); silently ignoring an explicit other
  // estimator would mislead.
  if (kl.placement == KlPlacement::kReward && kl_c.has("estimator") &&
      kl.estimator != KlEstimator::kK1) {
    fail(kl_c, "estimator", "applies to placement 'loss' only; placement 'reward' uses k1");
  }

  section.get("entropy_coef", entropy_coef);
  require_range(section, "entropy_coef", entropy_coef, entropy_coef >= 0, ">= 0");
  get_enum(section, "ratio", kPolicyRatioNames, ratio);
  get_enum(section, "loss_agg", kLossAggNames, loss_agg);
  section.get("loss_agg_t_const", loss_agg_t_const);
  require_range(section, "loss_agg_t_const", loss_agg_t_const, loss_agg_t_const >= 0, ">= 0");
  if (loss_agg == LossAggMode::kSeqMeanTokenSumNorm && !(loss_agg_t_const > 0)) {
    fail(section, "loss_agg_t_const",
         "must be > 0 with loss_agg seq-mean-token-sum-norm (e.g. max_new_tokens)");
  }

  if (ratio == PolicyRatio::kSequence && loss_agg != LossAggMode::kSeqMeanTokenMean) {
    fail(section, "ratio", "'sequence' (GSPO) needs loss_agg seq-mean-token-mean");
  }

  core::Config tis_c = section.section("tis");
  tis_c.get("enabled", tis.enabled);
  tis_c.get("lo", tis.lo);
  tis_c.get("hi", tis.hi);
  get_enum(tis_c, "mode", kTisModeNames, tis.mode);
  require_range(tis_c, "lo", tis.lo, tis.lo >= 0, ">= 0");
  require_range(tis_c, "hi", tis.hi, tis.hi > tis.lo, "> tis.lo (" + format_number(tis.lo) + ")");
}

}  // namespace streamrl::rl
