#include "streamrl/rl/policy_update.h"

#include <chrono>
#include <cmath>

#include "streamrl/core/errors.h"
#include "streamrl/rl/loss_aggregation.h"
#include "streamrl/rl/sequences.h"

namespace streamrl::rl {
namespace {

// Per-token values of the output tokens placed at their positions in a right-padded batch.
torch::Tensor place(const std::vector<const ScoredSample*>& rows, int64_t T,
                    const std::vector<float>& (*field)(const ScoredSample&)) {
  torch::Tensor out = torch::zeros({static_cast<int64_t>(rows.size()), T});
  auto a = out.accessor<float, 2>();
  for (size_t b = 0; b < rows.size(); ++b) {
    const auto& v = field(*rows[b]);
    const size_t p = rows[b]->sample.prompt_ids.size();
    for (size_t t = 0; t < v.size(); ++t) a[b][p + t] = v[t];
  }
  return out;
}

const std::vector<float>& beh_field(const ScoredSample& s) { return s.sample.logprobs; }
const std::vector<float>& ref_field(const ScoredSample& s) { return s.ref_logprobs; }

struct MicroBatch {
  std::vector<const ScoredSample*> rows;
  SequenceBatch seq;
};

}  // namespace

std::vector<float> reference_logprobs(model::CausalLM& ref, const engine::Sample& s) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> ids(s.prompt_ids.begin(), s.prompt_ids.end());
  ids.insert(ids.end(), s.output_ids.begin(), s.output_ids.end());
  auto t = torch::tensor(ids, torch::kLong).view({1, -1});
  auto lp = ref->score(t, torch::ones_like(t, torch::kBool)).logprobs[0];
  auto tail = lp.narrow(0, s.prompt_ids.size(), s.output_ids.size()).contiguous();
  return std::vector<float>(tail.data_ptr<float>(), tail.data_ptr<float>() + tail.numel());
}

UpdateResult policy_update(model::CausalLM& model, torch::optim::Optimizer& optimizer,
                           const std::vector<ScoredSample>& samples, const RlLossConfig& loss,
                           const UpdateConfig& config, double lr, double grad_clip) {
  auto t0 = std::chrono::steady_clock::now();
  UpdateResult r;
  r.lr = lr;
  // 1. Micro-batches by token budget, and the global denominator over all of them (before any
  // backward, rl_algorithms.md §4 rule 1).
  std::vector<int64_t> lengths;
  for (const auto& s : samples) {
    lengths.push_back(
        static_cast<int64_t>(s.sample.prompt_ids.size() + s.sample.output_ids.size()));
  }
  std::vector<MicroBatch> micro;
  std::vector<torch::Tensor> masks;
  for (const auto& idx : pack_by_token_budget(lengths, config.micro_batch_tokens)) {
    MicroBatch mb;
    std::vector<std::vector<int32_t>> prompts, outputs;
    for (size_t i : idx) {
      mb.rows.push_back(&samples[i]);
      prompts.push_back(samples[i].sample.prompt_ids);
      outputs.push_back(samples[i].sample.output_ids);
    }
    mb.seq = make_sequence_batch(prompts, outputs);
    masks.push_back(mb.seq.completion);
    r.tokens += mb.seq.num_completion_tokens;
    micro.push_back(std::move(mb));
  }
  LossDenominator denom = global_denominator(masks, loss.loss_agg_t_const);

  // 2. Forward/backward per micro-batch; gradients accumulate by summation.
  set_lr(optimizer, lr);
  optimizer.zero_grad();
  const bool need_entropy = true;  // always logged (DESIGN.md §8)
  for (auto& mb : micro) {
    const int64_t T = mb.seq.tokens.size(1);
    std::vector<float> adv;
    for (const auto* s : mb.rows) adv.push_back(static_cast<float>(s->advantage));
    PolicyLossInputs in;
    in.mask = mb.seq.completion;
    in.advantages = torch::tensor(adv);
    in.beh_logp = place(mb.rows, T, beh_field);
    if (!mb.rows.front()->ref_logprobs.empty() && loss.kl.placement == KlPlacement::kLoss) {
      in.ref_logp = place(mb.rows, T, ref_field);
    }
    if (config.recompute_old_logprobs) {
      torch::NoGradGuard no_grad;
      in.old_logp = model->score(mb.seq.tokens, mb.seq.valid).logprobs;
    } else {
      in.old_logp = in.beh_logp;
    }
    model::ScoreOptions opt;
    opt.return_entropy = need_entropy;
    model::ScoreOutput out = model->score(mb.seq.tokens, mb.seq.valid, opt);
    in.logp = out.logprobs;
    in.entropy = loss.entropy_coef > 0 ? out.entropy : out.entropy.detach();
    PolicyLossOutput lo = compute_policy_loss(in, loss, denom);
    if (!std::isfinite(lo.metrics.loss)) {
      optimizer.zero_grad();
      throw RuntimeFailure("policy loss is not finite (" + std::to_string(lo.metrics.loss) + ")");
    }
    lo.loss.backward();
    r.metrics.merge(lo.metrics);
    r.micro_batches += 1;
  }

  // 3. Clip and step; a non-finite gradient norm leaves the parameters unchanged.
  r.grad_norm = clip_grad_norm(*model, grad_clip);
  if (!std::isfinite(r.grad_norm)) {
    optimizer.zero_grad();
    throw RuntimeFailure("gradient norm is not finite (" + std::to_string(r.grad_norm) + ")");
  }
  optimizer.step();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace streamrl::rl
