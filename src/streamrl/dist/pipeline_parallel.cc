#include "streamrl/dist/pipeline_parallel.h"

#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "streamrl/core/errors.h"

namespace streamrl::dist {

using torch::Tensor;

namespace {

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Point-to-point tags: the activation virtual stage v sends v + 1 for micro-batch m, and the
// gradient v + 1 sends back, each unique within one run (runs follow each other in order).
int tag(int micro_batch, int virtual_stage, int virtual_stages, bool gradient) {
  return 2 * (micro_batch * virtual_stages + virtual_stage) + (gradient ? 1 : 0);
}

// What a replica's stages must agree on before exchanging tensors: the whole schedule and every
// micro-batch's shape (FNV-1a, cut to 48 bits so a double carries it exactly). Stages that planned
// from different inputs would otherwise post receives of the wrong size, which Gloo answers by
// aborting the process.
uint64_t fingerprint(const pipeline::Schedule& schedule, const std::vector<StageBatch>& batches) {
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(schedule.stages), mix(schedule.chunks), mix(schedule.micro_batches);
  for (const auto& ops : schedule.ops) {
    mix(static_cast<int64_t>(ops.size()));
    for (const pipeline::Op& op : ops)
      mix(static_cast<int>(op.kind)), mix(op.micro_batch), mix(op.chunk);
  }
  for (const StageBatch& b : batches) mix(b.tokens.size(0)), mix(b.tokens.size(1));
  return h & ((uint64_t{1} << 48) - 1);
}

}  // namespace

PipelineLayout::PipelineLayout(int world, int pp, int rank) : world(world), pp(pp), rank(rank) {
  if (pp < 1 || world % pp != 0) {
    throw InputError("parallel.pp = " + std::to_string(pp) + " must be >= 1 and divide the " +
                     std::to_string(world) +
                     " ranks (run under streamrl launch --nproc N, N a multiple of pp)");
  }
}

PipelineStage::PipelineStage(model::CausalLM& model, ProcessGroup& world, int pp,
                             const pipeline::Partition& partition)
    : model_(model),
      world_(world),
      layout_(world.world_size(), pp, world.rank()),
      partition_(partition) {
  const int layers = model->config().num_hidden_layers;
  const int vs = partition.stages * partition.chunks;
  if (partition.stages != pp || static_cast<int>(partition.boundaries.size()) != vs + 1 ||
      partition.boundaries.front() != 0 || partition.boundaries.back() != layers) {
    throw InputError("pipeline stage: the partition of " + std::to_string(partition.stages) +
                     " stages does not cut the model's " + std::to_string(layers) +
                     " layers for parallel.pp = " + std::to_string(pp));
  }
}

void PipelineStage::check_agreement(const pipeline::Schedule& schedule,
                                    const std::vector<StageBatch>& batches) {
  std::vector<double> prints(world_.world_size(), 0.0);
  prints[layout_.rank] = static_cast<double>(fingerprint(schedule, batches));
  prints = world_.all_reduce_sum(prints);
  for (int s = 0; s < layout_.pp; ++s) {
    if (prints[layout_.rank_of_stage(s)] != prints[layout_.rank]) {
      throw RuntimeFailure("pipeline stage " + std::to_string(layout_.stage()) + " of replica " +
                           std::to_string(layout_.dp_rank()) + ": stage " + std::to_string(s) +
                           " was given another schedule or other micro-batch shapes (every stage "
                           "of a replica must plan from the same lengths and profile)");
    }
  }
}

PipelineRunStats PipelineStage::run(const pipeline::Schedule& schedule,
                                    const std::vector<StageBatch>& batches, const StageLoss& loss,
                                    const model::ScoreOptions& options,
                                    const StageRouterLoss& router_loss) {
  if (schedule.stages != layout_.pp || schedule.chunks != partition_.chunks ||
      schedule.micro_batches != static_cast<int>(batches.size())) {
    throw InputError("pipeline stage: a schedule of " + std::to_string(schedule.stages) + "x" +
                     std::to_string(schedule.chunks) + " stages and " +
                     std::to_string(schedule.micro_batches) + " micro-batches for " +
                     std::to_string(partition_.stages) + "x" + std::to_string(partition_.chunks) +
                     " stages and " + std::to_string(batches.size()) + " batches");
  }
  check_agreement(schedule, batches);
  const int stage = layout_.stage();
  const int vs = schedule.virtual_stages();
  const int64_t hidden = model_->config().hidden_size;
  const torch::TensorOptions act = model_->options();
  struct Live {
    Tensor input, output, loss;
    Tensor router;  // a stage before the last: its layers' router loss, backwarded with output
  };
  std::map<std::pair<int, int>, Live> live;  // (micro-batch, chunk) between forward and backward
  PipelineRunStats stats;
  // The losses summed where they are (a device's would synchronise on every .item()), read once.
  Tensor loss_sum = torch::zeros({}, torch::TensorOptions(act.device()).dtype(torch::kFloat64));
  const auto peer = [&](int virtual_stage) {
    return layout_.rank_of_stage(schedule.stage_of(virtual_stage));
  };
  for (const pipeline::Op& op : schedule.ops[stage]) {
    const int v = schedule.virtual_stage(stage, op.chunk);
    const int m = op.micro_batch;
    const StageBatch& b = batches[m];
    const std::vector<int64_t> shape = {b.tokens.size(0), b.tokens.size(1), hidden};
    if (op.kind == pipeline::OpKind::kForward) {
      Live& l = live[{m, op.chunk}];
      if (v > 0) {
        const auto t = std::chrono::steady_clock::now();
        l.input = world_.recv(shape, act, peer(v - 1), tag(m, v - 1, vs, false));
        l.input.requires_grad_(true);
        stats.wait_s += since(t);
      }
      const auto t = std::chrono::steady_clock::now();
      model::ScoreOptions o = options;
      if (!b.routing.empty()) o.replay_routing = &b.routing;
      model::StageOutput out = model_->score_layers(
          b.tokens, b.valid, l.input, partition_.boundaries[v], partition_.boundaries[v + 1], o);
      if (v == vs - 1) {
        l.loss = loss(m, out.score);
        loss_sum += l.loss.detach();
      } else {
        l.output = out.hidden;
        world_.send(out.hidden, peer(v + 1), tag(m, v, vs, false));
        if (out.moe && router_loss) l.router = router_loss(m, *out.moe);
        if (l.router.defined()) loss_sum += l.router.detach();
      }
      const double seconds = since(t);
      stats.compute_s += seconds;
      stats.ops.push_back({stage, op, seconds});
      ++stats.forwards;
    } else {
      auto it = live.find({m, op.chunk});
      if (it == live.end()) {
        throw InputError("pipeline stage " + std::to_string(stage) + ": " + pipeline::describe(op) +
                         " before its forward");
      }
      Live l = std::move(it->second);
      live.erase(it);
      double seconds = 0;
      if (v == vs - 1) {
        const auto t = std::chrono::steady_clock::now();
        l.loss.backward();
        seconds = since(t);
      } else {
        auto t = std::chrono::steady_clock::now();
        const Tensor grad = world_.recv(shape, act, peer(v + 1), tag(m, v, vs, true));
        stats.wait_s += since(t);
        t = std::chrono::steady_clock::now();
        if (l.router.defined() && l.router.requires_grad()) {
          torch::autograd::backward({l.output, l.router}, {grad, torch::ones_like(l.router)});
        } else {
          l.output.backward(grad);
        }
        seconds = since(t);
      }
      stats.compute_s += seconds;
      stats.ops.push_back({stage, op, seconds});
      if (v > 0) world_.send(l.input.grad(), peer(v - 1), tag(m, v - 1, vs, true));
      ++stats.backwards;
    }
  }
  if (!live.empty()) {
    throw InputError("pipeline stage " + std::to_string(stage) + ": the schedule left " +
                     std::to_string(live.size()) + " forwards without their backward");
  }
  world_.wait_sends();
  stats.loss = loss_sum.item<double>();
  return stats;
}

void PipelineStage::all_reduce_gradients() {
  dist::all_reduce_gradients(world_, model_->parameters());
}

}  // namespace streamrl::dist
