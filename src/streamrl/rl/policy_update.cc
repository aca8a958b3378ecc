#include "streamrl/rl/policy_update.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "streamrl/core/clock.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/packing.h"
#include "streamrl/core/threads.h"
#include "streamrl/rl/loss_aggregation.h"
#include "streamrl/rl/moe_curriculum.h"
#include "streamrl/rl/sequences.h"

namespace streamrl::rl {
namespace {

using core::Clock;

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

// The engine's routing of each row's tokens as one [B, T, K] tensor per MoE layer (-1 where it
// has none: padding and the last token), or none when some row came without routing (a remote
// instance, or a dense policy).
std::vector<torch::Tensor> engine_routing(const std::vector<const ScoredSample*>& rows, int64_t T) {
  const engine::Sample& first = rows.front()->sample;
  const int64_t L = first.routing_layers, K = first.routing_k;
  for (const auto* r : rows) {
    if (r->sample.routed_experts.empty() || r->sample.routing_layers != L ||
        r->sample.routing_k != K) {
      return {};
    }
  }
  const int64_t B = static_cast<int64_t>(rows.size());
  torch::Tensor all = torch::full({B, T, L, K}, -1, torch::kLong);
  auto a = all.accessor<int64_t, 4>();
  for (int64_t b = 0; b < B; ++b) {
    const auto& ids = rows[b]->sample.routed_experts;
    const int64_t positions = std::min<int64_t>(T, static_cast<int64_t>(ids.size()) / (L * K));
    for (int64_t t = 0; t < positions; ++t) {
      for (int64_t l = 0; l < L; ++l) {
        for (int64_t k = 0; k < K; ++k) a[b][t][l][k] = ids[(t * L + l) * K + k];
      }
    }
  }
  std::vector<torch::Tensor> per_layer;
  for (int64_t l = 0; l < L; ++l) per_layer.push_back(all.select(2, l));
  return per_layer;
}

// Output tokens the model sampled: a multi-turn sample's appended tokens (tool results) are
// context only, outside the loss, the KL and the global token count.
int64_t sampled_tokens(const engine::Sample& s) {
  const auto& m = s.sampled_mask;
  if (m.empty()) return static_cast<int64_t>(s.output_ids.size());
  return static_cast<int64_t>(std::count(m.begin(), m.end(), uint8_t{1}));
}

int64_t total_tokens(const ScoredSample& s) {
  return static_cast<int64_t>(s.sample.prompt_ids.size() + s.sample.output_ids.size());
}

}  // namespace

std::vector<float> reference_logprobs(model::CausalLM& ref, const engine::Sample& s) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> ids(s.prompt_ids.begin(), s.prompt_ids.end());
  ids.insert(ids.end(), s.output_ids.begin(), s.output_ids.end());
  auto t = torch::tensor(ids, torch::kLong).view({1, -1});
  auto lp = ref->score(t, torch::ones_like(t, torch::kBool)).logprobs[0];
  auto tail = lp.narrow(0, s.prompt_ids.size(), s.output_ids.size()).cpu().contiguous();
  return std::vector<float>(tail.data_ptr<float>(), tail.data_ptr<float>() + tail.numel());
}

PolicyStep::PolicyStep(model::CausalLM& model, torch::optim::Optimizer& optimizer,
                       const RlLossConfig& loss, const UpdateConfig& config)
    : model_(model), optimizer_(optimizer), loss_(loss), config_(config) {
  const bool kl_in_loss = loss.kl.placement == KlPlacement::kLoss && loss.kl.coef > 0;
  skip_zero_advantage_ = !kl_in_loss && loss.entropy_coef == 0;
  clear_grads(optimizer_);
}

void PolicyStep::set_pipeline(PipelineTrainer* pipeline, dist::ProcessGroup* world) {
  if (pipeline && config_.recompute_old_logprobs) {
    throw InputError(
        "parallel.pp with train.recompute_old_logprobs is not supported: the pipeline trainer "
        "takes the generator's log-probs");
  }
  pipeline_ = pipeline;
  group_ = world;
}

void PolicyStep::set_expert_parallel(dist::ExpertDataParallel* experts, model::CausalLM whole) {
  if (experts && pipeline_) throw InputError("parallel.ep and parallel.pp cannot be combined");
  experts_ = experts;
  whole_ = std::move(whole);
}

void PolicyStep::add(std::vector<ScoredSample> samples, bool eager) {
  for (auto& s : samples) {
    if (skips(s)) {
      result_.tokens += sampled_tokens(s.sample);
      sequences_ += s.sample.output_ids.empty() ? 0 : 1;
      result_.skipped_samples += 1;
      continue;
    }
    buffered_tokens_ += total_tokens(s);
    buffer_.push_back(std::move(s));
  }
  // Waiting for a larger pool to pack from pads less but leaves more work after the last
  // sample: with 4 micro-batches' worth, stream training was 11% less busy and 10% slower.
  // A pipeline trains once per step, on what all of its stages gathered; expert ranks train
  // once per step too, as many micro-batches each.
  if (eager && !pipeline_ && !experts_ && buffered_tokens_ >= config_.micro_batch_tokens) {
    run_buffered(/*full_only=*/true);
  }
}

void PolicyStep::preview_next(const std::vector<ScoredSample>* next) {
  if (!pipeline_) return;
  previewed_ = true;
  if (!next) return;
  next_lengths_.emplace();
  for (const ScoredSample& s : *next) {
    if (!skips(s)) next_lengths_->push_back(total_tokens(s));
  }
}

void PolicyStep::flush() {
  if (!pipeline_) run_buffered(/*full_only=*/false);
}

void PolicyStep::run_buffered(bool full_only) {
  if (buffer_.empty() && !experts_) return;
  std::vector<int64_t> lengths;
  for (const auto& s : buffer_) lengths.push_back(total_tokens(s));
  // While more samples are coming, partly filled or mostly padded packs wait for them.
  core::EagerPacks packs;
  if (!buffer_.empty()) {
    packs = core::pack_eager(lengths, config_.micro_batch_tokens, /*more_coming=*/full_only);
  }
  if (config_.moe_curriculum) order_by_curriculum(&packs.run);
  const int64_t mine = static_cast<int64_t>(packs.run.size());
  // Agreed before any micro-batch runs: every one of them holds all-to-alls.
  const int64_t most = experts_ ? experts_->max_over_expert_group(mine) : mine;
  for (const auto& idx : packs.run) {
    std::vector<const ScoredSample*> rows;
    for (size_t i : idx) rows.push_back(&buffer_[i]);
    run_micro_batch(rows);
  }
  for (int64_t i = mine; i < most; ++i) run_idle_micro_batch();
  std::vector<ScoredSample> rest;
  buffered_tokens_ = 0;
  for (size_t i : packs.keep) {
    buffered_tokens_ += lengths[i];
    rest.push_back(std::move(buffer_[i]));
  }
  buffer_ = std::move(rest);
}

void PolicyStep::order_by_curriculum(std::vector<std::vector<size_t>>* packs) const {
  // A pack's profile is the token-weighted mean of its samples' (each sample's own share).
  std::vector<RoutingProfile> profiles;
  for (const auto& idx : *packs) {
    RoutingProfile mean;
    double weight = 0;
    for (size_t i : idx) {
      const RoutingProfile p = engine_routing_profile(buffer_[i].sample);
      if (p.empty()) continue;
      const double w = static_cast<double>(total_tokens(buffer_[i]));
      mean.resize(p.size(), 0.0);
      for (size_t l = 0; l < p.size(); ++l) mean[l] += p[l] * w;
      weight += w;
    }
    for (double& v : mean) v /= std::max(weight, 1.0);
    profiles.push_back(std::move(mean));
  }
  std::vector<std::vector<size_t>> ordered;
  for (size_t i : curriculum_order(profiles)) ordered.push_back(std::move((*packs)[i]));
  *packs = std::move(ordered);
}

struct PolicyStep::Prepared {
  SequenceBatch seq;
  PolicyLossInputs in;
  model::ScoreOptions opt;
  std::vector<torch::Tensor> routing;
  int64_t rows = 0, sequences = 0;
};

PolicyStep::Prepared PolicyStep::prepare(const std::vector<const ScoredSample*>& rows) const {
  Prepared p;
  std::vector<std::vector<int32_t>> prompts, outputs;
  std::vector<const std::vector<uint8_t>*> trained;  // multi-turn: appended tokens are context
  std::vector<float> adv;
  for (const auto* s : rows) {
    prompts.push_back(s->sample.prompt_ids);
    outputs.push_back(s->sample.output_ids);
    trained.push_back(&s->sample.sampled_mask);
    adv.push_back(static_cast<float>(s->advantage));
    p.sequences += s->sample.output_ids.empty() ? 0 : 1;
  }
  p.rows = static_cast<int64_t>(rows.size());
  p.seq = make_sequence_batch(prompts, outputs, trained);
  const int64_t T = p.seq.tokens.size(1);

  // Built on the host, computed on the policy's device.
  const torch::Device dev = model_->device();
  p.in.mask = p.seq.completion.to(dev);
  p.in.advantages = torch::tensor(adv).to(dev);
  p.in.beh_logp = place(rows, T, beh_field).to(dev);
  if (!rows.front()->ref_logprobs.empty() && loss_.kl.placement == KlPlacement::kLoss) {
    p.in.ref_logp = place(rows, T, ref_field).to(dev);
  }
  p.seq.tokens = p.seq.tokens.to(dev);
  p.seq.valid = p.seq.valid.to(dev);
  p.opt.temperature = config_.temperature;
  p.opt.return_entropy = true;  // always logged
  // MoE: the trainer's routing is compared with the engine's, and with routing replay follows it.
  if (model_->config().is_moe()) p.routing = engine_routing(rows, T);
  return p;
}

torch::Tensor PolicyStep::router_loss(const Prepared& p, const model::MoeAuxLosses& aux,
                                      model::MoeStats& router) const {
  router.add(aux, moe_.aux_top1_only, p.seq.num_completion_tokens);
  if (moe_.aux_loss_coef <= 0 && moe_.z_loss_coef <= 0) return {};
  // Each term is a sum that finish() divides by the global count, so the router loss (a mean
  // over this micro-batch's tokens) is weighted by the micro-batch's share of that count.
  const double weight = loss_.loss_agg == LossAggMode::kTokenMean
                            ? static_cast<double>(p.seq.num_completion_tokens)
                            : static_cast<double>(p.rows);
  return moe_.loss(aux) * weight;
}

torch::Tensor PolicyStep::loss_of(Prepared& p, const model::ScoreOutput& out,
                                  model::MoeStats& router) {
  PolicyLossInputs& in = p.in;
  if (!in.old_logp.defined()) in.old_logp = in.beh_logp;
  in.logp = out.logprobs;
  in.entropy = loss_.entropy_coef > 0 ? out.entropy : out.entropy.detach();
  // Unnormalised: a unit denominator makes each term a plain sum; finish() divides by the count.
  const LossDenominator unit{1.0, 1.0, loss_.loss_agg_t_const};
  PolicyLossOutput lo = compute_policy_loss(in, loss_, unit);
  if (!std::isfinite(lo.metrics.loss)) {
    clear_grads(optimizer_);
    throw RuntimeFailure("policy loss is not finite (" + std::to_string(lo.metrics.loss) + ")");
  }
  const int64_t tokens = p.seq.num_completion_tokens;
  if (out.moe) {
    const torch::Tensor r = router_loss(p, *out.moe, router);
    if (r.defined()) lo.loss = lo.loss + r;
  }
  // Counted where the loss is (a pipeline's last stage), so the ranks' sums are the global count.
  result_.tokens += tokens;
  sequences_ += static_cast<double>(p.sequences);
  result_.metrics.merge(lo.metrics);
  if (p.rows > 0) result_.micro_batches += 1;  // an idle one (expert parallelism) is no batch
  return lo.loss;
}

void PolicyStep::run_micro_batch(const std::vector<const ScoredSample*>& rows) {
  telemetry::ScopedSpan span(trace_, trace_track_, "micro-batch");
  span.args() = {{"samples", rows.size()}};
  Prepared p = prepare(rows);
  run_prepared(p);
}

void PolicyStep::run_idle_micro_batch() {
  telemetry::ScopedSpan span(trace_, trace_track_, "idle micro-batch");
  ScoredSample idle;  // two tokens, masked out: the loss stays a function of the outputs
  idle.sample.prompt_ids = {0};
  idle.sample.output_ids = {0};
  idle.sample.logprobs = {0.0f};
  idle.ref_logprobs = {0.0f};
  Prepared p = prepare({&idle});
  p.in.mask.zero_();
  p.seq.num_completion_tokens = 0;
  p.rows = 0;
  p.sequences = 0;
  run_prepared(p);
}

void PolicyStep::run_prepared(Prepared& p) {
  const auto t0 = Clock::now();
  const double cpu0 = core::thread_cpu_seconds();
  if (!p.routing.empty()) {
    p.opt.replay_routing = &p.routing;
    p.opt.replay_apply = moe_.routing_replay;
  }
  if (config_.recompute_old_logprobs) {
    torch::NoGradGuard no_grad;
    p.in.old_logp = model_->score(p.seq.tokens, p.seq.valid, p.opt).logprobs;
  }
  const bool feeds = sparse_ && sparse_->capture(p.opt);
  const model::ScoreOutput out = model_->score(p.seq.tokens, p.seq.valid, p.opt);
  loss_of(p, out, result_.moe).backward();
  if (feeds) sparse_->observe_captured(p.seq.valid);
  result_.seconds += core::seconds_since(t0);
  result_.cpu_seconds += core::thread_cpu_seconds() - cpu0;
}

void PolicyStep::wave() {
  if (pipeline_) run_pipelined(/*last=*/false);
}

void PolicyStep::run_pipelined(bool last) {
  const auto t0 = Clock::now();
  const double cpu0 = core::thread_cpu_seconds();
  // The replica's stages train on the same samples: the union of what each of them added.
  std::vector<ScoredSample> samples;
  for (const std::string& stage : pipeline_->gather_replica(encode_samples(buffer_))) {
    std::vector<ScoredSample> part = decode_samples(stage);
    for (auto& x : part) samples.push_back(std::move(x));
  }
  buffer_.clear();
  buffered_tokens_ = 0;
  std::vector<int64_t> lengths;
  for (const auto& x : samples) lengths.push_back(total_tokens(x));
  std::vector<Prepared> prepared;
  model::ScoreOptions opt;
  opt.temperature = config_.temperature;
  opt.return_entropy = true;
  opt.replay_apply = moe_.routing_replay;
  const int64_t micro_batches_before = result_.micro_batches;
  model::MoeStats router;  // this stage's layers
  // The next step's batch, planned on another thread while this step's last pass trains.
  if (last && previewed_) pipeline_->plan_next(next_lengths_);
  const PipelineStepStats stats = pipeline_->forward_backward(
      lengths,
      [&](const std::vector<int>& idx) {
        std::vector<const ScoredSample*> rows;
        for (int i : idx) rows.push_back(&samples[static_cast<size_t>(i)]);
        prepared.push_back(prepare(rows));
        const Prepared& p = prepared.back();
        return dist::StageBatch{p.seq.tokens, p.seq.valid, p.routing};
      },
      [&](int index, const model::ScoreOutput& out) {
        return loss_of(prepared[static_cast<size_t>(index)], out, router);
      },
      opt,
      [&](int index, const model::MoeAuxLosses& aux) {
        return router_loss(prepared[static_cast<size_t>(index)], aux, router);
      },
      last);
  result_.moe.merge(pipeline_->gather_router_stats(router));
  // Counted by the last stage only; every stage reports its replica's.
  result_.micro_batches = micro_batches_before + stats.micro_batches;
  if (stats.micro_batches > 0) {
    ++waves_;
    result_.pipeline = stats.to_json();  // the last pass that trained
  }
  if (last) {
    if (result_.pipeline.is_null()) result_.pipeline = stats.to_json();
    result_.pipeline["waves"] = waves_;
  }
  result_.seconds += core::seconds_since(t0);
  result_.cpu_seconds += core::thread_cpu_seconds() - cpu0;
}

UpdateResult PolicyStep::finish(double lr, double grad_clip) {
  if (pipeline_) {
    run_pipelined(/*last=*/true);  // gradients come back summed over the world
  } else {
    flush();
  }
  const auto t0 = Clock::now();
  const double cpu0 = core::thread_cpu_seconds();
  if (group_ && group_->world_size() > 1) {
    if (experts_) {
      experts_->all_reduce_gradients(model_->named_parameters());
    } else if (!pipeline_) {
      dist::all_reduce_gradients(*group_, model_->parameters());
    }
    PolicyLossMetrics& m = result_.metrics;
    double tokens = static_cast<double>(result_.tokens);
    std::vector<double*> sums = {&tokens,        &sequences_,       &m.loss,
                                 &m.policy_term, &m.kl_term,        &m.entropy_term,
                                 &m.tokens,      &m.clipped_tokens, &m.dual_clipped_tokens,
                                 &m.ppo_kl_sum,  &m.ratio_sum,      &m.kl_sum,
                                 &m.entropy_sum, &m.tis_weight_sum, &m.tis_outside_tokens};
    std::vector<double> local;
    for (double* v : sums) local.push_back(*v);
    const std::vector<double> global = group_->all_reduce_sum(local);
    for (size_t i = 0; i < sums.size(); ++i) *sums[i] = global[i];
    result_.tokens = static_cast<int64_t>(std::llround(tokens));
  }
  // The global count of rl_algorithms.md §4, over all DP ranks.
  double count = 0;
  switch (loss_.loss_agg) {
    case LossAggMode::kTokenMean:
      count = static_cast<double>(result_.tokens);
      break;
    case LossAggMode::kSeqMeanTokenMean:
      count = sequences_;
      break;
    case LossAggMode::kSeqMeanTokenSumNorm:
      count = sequences_;  // t_const already divided per micro-batch
      break;
  }
  if (count > 0) {
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) {
      if (p.grad().defined()) p.mutable_grad().div_(count);
    }
    PolicyLossMetrics& m = result_.metrics;
    m.loss /= count;
    m.policy_term /= count;
    m.kl_term /= count;
    m.entropy_term /= count;
  }
  if (sparse_) result_.sparse_attention = sparse_->metrics();
  result_.lr = lr;
  result_.steps = 1;
  if (count == 0) {
    // No sample on any rank (a mini-batch whose groups never came): Adam's moments would still
    // move the weights on zero gradients.
    clear_grads(optimizer_);
    result_.steps = 0;
    return result_;
  }
  set_lr(optimizer_, lr);
  result_.grad_norm = clip_grad_norm(*model_, grad_clip, experts_);
  if (!std::isfinite(result_.grad_norm)) {
    clear_grads(optimizer_);
    throw RuntimeFailure("gradient norm is not finite (" + std::to_string(result_.grad_norm) + ")");
  }
  optimizer_.step();
  if (experts_) experts_->all_gather_model(*model_, *whole_);
  result_.seconds += core::seconds_since(t0);
  result_.cpu_seconds += core::thread_cpu_seconds() - cpu0;
  return result_;
}

UpdateResult policy_update(model::CausalLM& model, torch::optim::Optimizer& optimizer,
                           std::vector<ScoredSample> samples, const RlLossConfig& loss,
                           const UpdateConfig& config, double lr, double grad_clip) {
  PolicyStep step(model, optimizer, loss, config);
  step.add(std::move(samples), /*eager=*/false);
  return step.finish(lr, grad_clip);
}

}  // namespace streamrl::rl
