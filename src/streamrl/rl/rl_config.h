// The RL algorithm knobs as plain structs with documented
// defaults, and their reading from one config section. The maths in advantages.h, kl.h,
// loss_aggregation.h and policy_loss.h takes these structs, never a core::Config.
#pragma once

#include <optional>
#include <string_view>

namespace streamrl::core {
class Config;
}

namespace streamrl::rl {

// GRPO-family advantage (spec §1). Keys `adv.*` of the algorithm section.
struct AdvantageOptions {
  // adv.norm_by_std (true): divide by the group's unbiased std + epsilon (GRPO); false subtracts
  // the mean only (Dr.GRPO).
  bool norm_by_std = true;
  // adv.leave_one_out (false): baseline = mean of the *other* rewards (RLOO); with norm_by_std,
  // divide by the unbiased std of the others + epsilon, skipping the division where it is 0
  // (NeMo-RL's default variant).
  bool leave_one_out = false;
  // adv.epsilon (1e-6): added to the std before dividing (§1.2; verl, slime, ROLL, NeMo-RL).
  double epsilon = 1e-6;

  // Reads `adv.*` from the algorithm section; throws InputError naming the key for bad values.
  void read(const core::Config& section);
};

// Per-token KL estimators over d = clamp(logp - ref_logp, -20, 20) (spec §3.1).
enum class KlEstimator {
  kK1,      // "k1": d
  kK2,      // "k2": d^2 / 2
  kK3,      // "k3": exp(-d) + d - 1, clamped to [-10, 10] (verl "low_var_kl")
  kAbs,     // "abs": |d|
  kK3Plus,  // "k3+": value of k3, gradient of k2 (unbiased reverse-KL gradient, verl "k3+")
};

// Where the KL penalty acts (spec §3.2).
enum class KlPlacement {
  kLoss,    // "loss": coef * KL_t added to the per-token loss, same mask and aggregation
  kReward,  // "reward": coef * sum_t k1_t subtracted from the sequence reward (kl_reward_penalty)
};

// Loss aggregation modes with a global denominator (spec §4; verl names).
enum class LossAggMode {
  kTokenMean,           // "token-mean": sum m*l / N_tokens
  kSeqMeanTokenMean,    // "seq-mean-token-mean": (1 / N_seqs) sum_i [sum_t m*l / sum_t m]
  kSeqMeanTokenSumNorm  // "seq-mean-token-sum-norm": sum m*l / (N_seqs * T_const) (Dr.GRPO)
};

// What happens to tokens whose train/inference ratio w = exp(old - beh) leaves [lo, hi] (§6.2).
enum class TisMode {
  kTruncate,  // "truncate": TIS, the loss is multiplied by sg(clamp(w, lo, hi))
  kMask,      // "mask": ICEPOP, weight 0 outside [lo, hi] and 1 inside
};

// Whose importance ratio the clipped loss uses (spec §2 "optional variants").
enum class PolicyRatio {
  kToken,     // "token": rho_t = pi(y_t) / pi_old(y_t) per token (PPO, GRPO, DAPO)
  kSequence,  // "sequence": GSPO, s_i = exp(mean_t log-ratio of sequence i) (log clamped to
              // <= 10), straight-through per token: value s_i, gradient s_i * grad log pi(y_t);
              // clipping then keeps or drops whole sequences. Needs loss_agg
              // seq-mean-token-mean, and GSPO's clip ranges are far smaller (e.g. 3e-4, 4e-4).
};

// DAPO's overlong reward shaping (spec §2 "truncated samples"). Keys `overlong.*`. With
// L_max = rollout.max_new_tokens, a response of L tokens with L > L_max - buffer loses
// penalty * (L - (L_max - buffer)) / buffer from its reward (soft overlong punishment), so a
// truncated one loses `penalty`; with `filter`, truncated responses (no stop token) are left out
// of the update altogether (overlong filtering), after their group's advantages are computed.
struct OverlongOptions {
  int buffer = 0;  // overlong.buffer (0 = no soft penalty): tokens before L_max where it starts
  double penalty = 1.0;  // overlong.penalty (1.0): the penalty at L_max; >= 0
  bool filter = false;   // overlong.filter (false)

  void read(const core::Config& section);  // the algorithm section
};

// The soft overlong penalty (>= 0) of a response of `length` tokens under cap `max_new_tokens`.
double overlong_penalty(int length, int max_new_tokens, const OverlongOptions& options);

// PPO clip (spec §2). Keys `clip.*`.
struct ClipOptions {
  double eps_low = 0.2;      // clip.eps_low (0.2): ratio floor 1 - eps_low; in [0, 1)
  double eps_high = 0.2;     // clip.eps_high (0.2): ratio ceiling 1 + eps_high; >= 0 (DAPO: 0.28)
  double dual_clip_c = 0.0;  // clip.dual_clip_c (0 = off): for A < 0 cap the loss at -c*A; c > 1
};

// KL penalty (spec §3). Keys `kl.*`. Off by default, as in DeepSeek-R1-Zero, DAPO and TRL.
struct KlOptions {
  double coef = 0.0;                           // kl.coef (0): beta; >= 0
  KlEstimator estimator = KlEstimator::kK3;    // kl.estimator ("k3"): for placement loss only;
                                               // the reward placement always uses k1
  KlPlacement placement = KlPlacement::kLoss;  // kl.placement ("loss")
};

// Train/inference importance-sampling correction (spec §6.2). Keys `tis.*`.
struct TisOptions {
  bool enabled = false;               // tis.enabled (false)
  double lo = 0.5;                    // tis.lo (0.5): lower bound on w; >= 0
  double hi = 5.0;                    // tis.hi (5.0): upper bound on w; > lo (OpenRLHF's bounds)
  TisMode mode = TisMode::kTruncate;  // tis.mode ("truncate"); "mask" = ICEPOP
};

// Everything compute_policy_loss needs besides tensors.
struct RlLossConfig {
  ClipOptions clip;
  KlOptions kl;
  // entropy_coef (0): the loss subtracts coef * agg(H_t) (spec §5); >= 0. Entropy is logged
  // whenever the caller provides it.
  double entropy_coef = 0.0;
  // ratio ("token"): "sequence" is GSPO's sequence-level ratio (PolicyRatio).
  PolicyRatio ratio = PolicyRatio::kToken;
  // loss_agg ("token-mean"): aggregation mode, applied to policy loss, KL and entropy alike.
  LossAggMode loss_agg = LossAggMode::kTokenMean;
  // loss_agg_t_const (0): T_const of seq-mean-token-sum-norm, e.g. max_new_tokens; must be > 0
  // in that mode, never the padded width of a batch (spec §4 rule 4).
  double loss_agg_t_const = 0.0;
  TisOptions tis;

  // Reads clip.*, kl.*, entropy_coef, ratio, loss_agg, loss_agg_t_const and tis.* from the
  // algorithm section; throws InputError naming the key for bad values (one line).
  void read(const core::Config& section);
};

// Config spellings of the enums ("k3+", "seq-mean-token-mean", ...) and their inverses; parse_*
// return nullopt for an unknown spelling.
std::string_view name(KlEstimator estimator);
std::string_view name(KlPlacement placement);
std::string_view name(LossAggMode mode);
std::string_view name(TisMode mode);
std::string_view name(PolicyRatio ratio);
std::optional<KlEstimator> parse_kl_estimator(std::string_view text);
std::optional<KlPlacement> parse_kl_placement(std::string_view text);
std::optional<LossAggMode> parse_loss_agg_mode(std::string_view text);
std::optional<TisMode> parse_tis_mode(std::string_view text);

}  // namespace streamrl::rl
