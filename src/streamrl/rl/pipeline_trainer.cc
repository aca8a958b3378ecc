#include "streamrl/rl/pipeline_trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "streamrl/core/byte_codec.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/log.h"
#include "streamrl/model/layer_timing.h"
#include "streamrl/model/model_config.h"
#include "streamrl/pipeline/micro_batches.h"
#include "streamrl/planner/model_shape.h"
#include "streamrl/planner/pipeline_plan.h"

namespace streamrl::rl {

void ParallelConfig::read(const core::Config& parallel, bool train) {
  parallel.get("pp", pp);
  parallel.get("pp_chunks", chunks);
  parallel.get("pp_schedule", schedule);
  parallel.get("pp_micro_batches", micro_batches);
  parallel.get("pp_partition", partition);
  if (train) parallel.get("pp_waves", waves);
  if (pp < 1) throw InputError("parallel.pp must be >= 1, got " + std::to_string(pp));
  if (chunks < 1)
    throw InputError("parallel.pp_chunks must be >= 1, got " + std::to_string(chunks));
  if (schedule != "dynamic" && schedule != "1f1b") {
    throw InputError("parallel.pp_schedule must be dynamic or 1f1b, got '" + schedule + "'");
  }
  if (micro_batches < 0) throw InputError("parallel.pp_micro_batches must be >= 0");
  if (waves < 1) throw InputError("parallel.pp_waves must be >= 1, got " + std::to_string(waves));
  if (partition != "measured" && partition != "flops") {
    throw InputError("parallel.pp_partition must be measured or flops, got '" + partition + "'");
  }
  parallel.get("ep", ep);
  parallel.get("ep_chunks", ep_chunks);
  if (ep < 1) throw InputError("parallel.ep must be >= 1");
  if (ep_chunks < 1) throw InputError("parallel.ep_chunks must be >= 1");
  if (ep > 1 && pp > 1) {
    throw InputError("parallel.ep and parallel.pp cannot be combined (an MoE model takes either)");
  }
}

planner::PipelineProfile flops_profile(const model::ModelConfig& c) {
  planner::ModelShape shape = planner::model_shape_from_hf(model::to_json(c), "policy");
  shape.bytes_per_param = 4;  // the trainer's float32 activations cross the boundary
  // A nominal 10 GFLOP/s: only the ratios between ops matter to the plan, and the link terms
  // are scaled to match (loopback Gloo moves ~1 GB/s with ~100 us per message).
  planner::PipelineProfile p = planner::flops_pipeline_profile(shape, 10e9, /*lm_head=*/true);
  p.link_bytes_per_s = 1e9;
  p.link_latency_s = 100e-6;
  return p;
}

planner::PipelineProfile measured_profile(planner::PipelineProfile prior, model::CausalLM& model,
                                          dist::ProcessGroup& world, int64_t micro_batch_tokens) {
  const int layers = static_cast<int>(model->config().num_hidden_layers);
  if (static_cast<int>(prior.layers.size()) != layers) {
    throw InputError("measured_profile: the profile has " + std::to_string(prior.layers.size()) +
                     " layers, the model " + std::to_string(layers));
  }
  // Rows of RL's typical length; the cost terms keep the prior's shape (per token, per token^2),
  // scaled to what was measured at this shape.
  const int64_t row_tokens = std::max<int64_t>(
      1, std::min<int64_t>({64, micro_batch_tokens, model->config().max_position_embeddings}));
  const int64_t rows = std::max<int64_t>(1, micro_batch_tokens / row_tokens);
  const model::LayerSeconds timed = model::time_layers(model, rows, row_tokens, /*repeats=*/5);
  std::vector<double> seconds = timed.forward;
  seconds.insert(seconds.end(), timed.backward.begin(), timed.backward.end());
  seconds = world.all_reduce_sum(seconds);
  const double tokens = static_cast<double>(rows * row_tokens);
  const double tokens_sq = static_cast<double>(rows) * row_tokens * row_tokens;
  for (int l = 0; l < layers; ++l) {
    planner::PipelineLayerProfile& layer = prior.layers[static_cast<size_t>(l)];
    for (const pipeline::OpKind kind : {pipeline::OpKind::kForward, pipeline::OpKind::kBackward}) {
      const size_t at = static_cast<size_t>(l + (kind == pipeline::OpKind::kForward ? 0 : layers));
      const double measured = seconds[at] / world.world_size();
      const double modelled = layer.seconds(kind, tokens, tokens_sq);
      if (!(measured > 0) || !std::isfinite(measured) || !(modelled > 0)) continue;
      std::array<double, 3> terms = layer.terms(kind);
      for (double& t : terms) t *= measured / modelled;
      layer.set_terms(kind, terms);
    }
  }
  return prior;
}

namespace {

std::vector<double> layer_costs(const planner::PipelineProfile& p) {
  std::vector<double> costs;
  for (const auto& l : p.layers) costs.push_back(l.forward_per_token_s + l.backward_per_token_s);
  return costs;
}

}  // namespace

PipelineTrainer::PipelineTrainer(model::CausalLM& model, dist::ProcessGroup& world,
                                 const ParallelConfig& config, int64_t micro_batch_tokens,
                                 planner::PipelineProfile profile)
    : world_(world),
      config_(config),
      micro_batch_tokens_(micro_batch_tokens),
      moe_layers_(static_cast<size_t>(
          model->config().moe_layers_before(model->config().num_hidden_layers))),
      prior_(config.partition == "measured"
                 ? measured_profile(std::move(profile), model, world, micro_batch_tokens)
                 : std::move(profile)),
      profile_(prior_),
      partition_(pipeline::partition_layers(layer_costs(prior_), config.pp, config.chunks)),
      fit_(partition_),
      stage_(model, world, config.pp, partition_) {
  const dist::PipelineLayout& l = layout();
  if (l.dp() > 1) {
    std::vector<int> ranks;
    for (int s = 0; s < l.pp; ++s) ranks.push_back(l.rank_of_stage(s));
    replica_ = world.subgroup(ranks, "pp-replica-" + std::to_string(l.dp_rank()));
  }
  if (world.rank() == 0) {
    std::string cut;
    for (int v = 0; v + 1 < static_cast<int>(partition_.boundaries.size()); ++v) {
      cut += " [" + std::to_string(partition_.boundaries[static_cast<size_t>(v)]) + ", " +
             std::to_string(partition_.boundaries[static_cast<size_t>(v) + 1]) + ")";
    }
    const std::vector<double> costs = partition_.virtual_stage_costs(layer_costs(prior_));
    double total = 0;
    for (double x : costs) total += x;
    std::string shares;
    for (double x : costs) {
      shares += (shares.empty() ? "" : " / ") + std::to_string(std::lround(100 * x / total)) + "%";
    }
    SLOG(kInfo) << "pipeline: layers of each virtual stage" << cut << ", " << shares << " of the "
                << config_.partition << " cost";
  }
}

nlohmann::json PipelineStepStats::to_json() const {
  return {{"schedule", schedule},
          {"plan", plan},
          {"micro_batches", micro_batches},
          {"compute_s", run.compute_s},
          {"wait_s", run.wait_s},
          {"step_s", step_s},
          {"planned_step_s", planned_step_s},
          {"predicted_step_s", predicted_step_s},
          {"plan_s", plan_s},
          {"plan_wait_s", plan_wait_s},
          {"planned_ahead", planned_ahead}};
}

std::vector<std::string> PipelineTrainer::gather_replica(const std::string& bytes) {
  // With one replica the world is the replica, its ranks the stages in order.
  return replica_ ? replica_->all_gather_bytes(bytes) : world_.all_gather_bytes(bytes);
}

model::MoeStats PipelineTrainer::gather_router_stats(const model::MoeStats& stage) {
  if (moe_layers_ == 0) return stage;
  const std::vector<double> values = stage.to_values(moe_layers_);
  return model::MoeStats::from_values(replica_ ? replica_->all_reduce_sum(values)
                                               : world_.all_reduce_sum(values));
}

std::pair<int64_t, int64_t> PipelineTrainer::replica_rows(int64_t n) const {
  const dist::PipelineLayout& l = layout();
  return {n * l.dp_rank() / l.dp(), n * (l.dp_rank() + 1) / l.dp()};
}

int PipelineTrainer::micro_batch_count(size_t sequences) const {
  const int pp = config_.pp;
  int count = config_.micro_batches > 0 ? config_.micro_batches : 2 * pp;
  count = std::min<int>(count, static_cast<int>(sequences));
  // The interleaved order runs full groups of pp micro-batches only.
  if (config_.chunks > 1 && count > pp) count -= count % pp;
  return count;
}

planner::PipelinePlanOptions PipelineTrainer::plan_options(int micro_batches) const {
  planner::PipelinePlanOptions o;
  o.token_cost = profile_.token_cost();
  o.target_tokens = micro_batch_tokens_;
  o.padded = true;  // StageBatch rows are padded to the micro-batch's longest
  o.static_micro_batches = micro_batches;
  // A candidate cap, not a clock: every stage must arrive at the same plan.
  o.time_budget_s = std::numeric_limits<double>::infinity();
  o.max_candidates_per_split = 8;
  return o;
}

void PipelineTrainer::plan_ahead(const std::vector<int64_t>& lengths) {
  if (config_.schedule != "dynamic" || lengths.empty()) return;
  const planner::PipelinePlanOptions options = plan_options(micro_batch_count(lengths.size()));
  // Its thread starts with the first batch handed over.
  if (!ahead_) ahead_ = std::make_unique<planner::PipelinePlanAhead>(profile_, partition_, options);
  ++ahead_id_;
  ahead_->submit(ahead_id_, lengths, options, profile_);
}

void PipelineTrainer::plan_next(const std::optional<std::vector<int64_t>>& own) {
  // Whether the share is known (an empty share is known), then its lengths.
  core::ByteWriter w;
  w.put<uint8_t>(own ? 1 : 0);
  if (own) w.put(*own);
  std::vector<int64_t> lengths;
  for (const std::string& stage : gather_replica(w.take())) {
    core::ByteReader r(stage, "planned lengths");
    if (r.get<uint8_t>() == 0) return;  // a stage's share is still coming
    const std::vector<int64_t> share = r.get_vector<int64_t>();
    lengths.insert(lengths.end(), share.begin(), share.end());
  }
  plan_ahead(lengths);
}

PipelineStepStats PipelineTrainer::forward_backward(
    const std::vector<int64_t>& lengths,
    const std::function<dist::StageBatch(const std::vector<int>&)>& make,
    const dist::StageLoss& loss, const model::ScoreOptions& options,
    const dist::StageRouterLoss& router_loss, bool reduce) {
  PipelineStepStats stats;
  std::vector<pipeline::MicroBatch> mbs;
  pipeline::Schedule schedule;
  planner::PipelineEmulation emulation;
  std::optional<planner::PipelineEmulation> planned_here;  // a plan made now, on profile_
  const bool fitted = fit_.fitted();  // else the emulation is of the prior: nothing to calibrate
  if (!lengths.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    const int count = micro_batch_count(lengths.size());
    if (config_.schedule == "1f1b") {
      // Grouped by length: the stages compute padded micro-batches.
      mbs = pipeline::split_static_grouped(lengths, count);
      schedule = pipeline::interleaved_one_f_one_b(config_.pp, config_.chunks,
                                                   static_cast<int>(mbs.size()));
    } else {
      // This batch's plan when plan_ahead() submitted it (batches submitted before it and never
      // run are dropped, later ones kept); else planned here.
      int64_t id = 0;
      std::optional<planner::PipelinePlan> ahead =
          ahead_ ? ahead_->take_matching(lengths, &id) : std::nullopt;
      stats.planned_ahead = ahead.has_value();
      if (stats.planned_ahead) stats.plan_s = ahead_->timing(id)->planning_s;
      planner::PipelinePlan plan = ahead ? std::move(*ahead)
                                         : planner::plan_pipeline(lengths, profile_, partition_,
                                                                  plan_options(count), emulator_);
      stats.plan = plan.split + " " + plan.candidate;
      mbs = std::move(plan.micro_batches);
      schedule = std::move(plan.schedule);
      if (!stats.planned_ahead) planned_here = std::move(plan.emulation);
    }
    // On the profile as it stands: a plan made here was emulated on it already; one made ahead
    // used the profile before the last step.
    emulation = planned_here ? std::move(*planned_here)
                             : emulator_.run(schedule,
                                             planner::pipeline_op_costs(profile_, partition_, mbs));
    stats.planned_step_s = emulation.step_s;
    stats.predicted_step_s = calibration_.step_s(emulation);
    stats.plan_wait_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!stats.planned_ahead) stats.plan_s = stats.plan_wait_s;
    std::vector<dist::StageBatch> batches;
    for (const pipeline::MicroBatch& mb : mbs) batches.push_back(make(mb.samples));
    const auto t1 = std::chrono::steady_clock::now();
    stats.run = stage_.run(schedule, batches, loss, options, router_loss);
    stats.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    if (fitted) {
      calibration_.decay(planner::PipelineCostFit::kKeepPerStep);
      calibration_.add(emulation, stats.step_s);
    }
  }
  stats.schedule = schedule.name;
  stats.micro_batches = static_cast<int>(mbs.size());
  if (reduce) stage_.all_reduce_gradients();
  // The loss and every stage's op timings in one collective; each rank then refits alike.
  planner::PipelineCostFit step_ops(partition_);
  step_ops.add(stats.run.ops, mbs);
  std::vector<double> sums = step_ops.sums();
  sums.push_back(stats.run.loss);
  sums = world_.all_reduce_sum(sums);
  stats.loss = sums.back();
  sums.pop_back();
  // A pass where no replica trained (a wave before any group was in) says nothing about costs.
  if (std::any_of(sums.begin(), sums.end(), [](double v) { return v != 0; })) {
    fit_.decay(planner::PipelineCostFit::kKeepPerStep);
    fit_.merge(sums);
    profile_ = fit_.apply(prior_);
  }
  return stats;
}

}  // namespace streamrl::rl
