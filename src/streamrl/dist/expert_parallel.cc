#include "streamrl/dist/expert_parallel.h"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "streamrl/core/errors.h"
#include "streamrl/dist/backward_comm.h"

namespace streamrl::dist {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The exchange as an autograd function: the rows this rank sent get the gradient of the rows the
// others computed from them, which travels back by the reverse splits. The backward exchange is
// scheduled beside the gradient all-reduces when the group has a BackwardComm.
struct AllToAll : torch::autograd::Function<AllToAll> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, int64_t group,
                        std::vector<int64_t> send, std::vector<int64_t> recv) {
    ctx->saved_data["group"] = group;  // the group outlives every graph built through it
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return reinterpret_cast<ExpertParallelGroup*>(group)->group().all_to_all(x, send, recv);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto* g = reinterpret_cast<ExpertParallelGroup*>(ctx->saved_data["group"].toInt());
    const Tensor out = grad[0].contiguous();
    BackwardComm* comm = g->backward_comm();
    if (comm) comm->all_to_all_begins(out.numel() * static_cast<int64_t>(out.element_size()));
    const Tensor back = g->group().all_to_all(out, ctx->saved_data["recv"].toIntVector(),
                                              ctx->saved_data["send"].toIntVector());
    if (comm) comm->all_to_all_ends();
    return {back, Tensor(), Tensor(), Tensor()};
  }
};

// The exchange of AllToAll left in flight: forward starts it and returns the tensor Gloo fills
// (autograd reads no data in forward), the caller waits through `pending` before reading it.
// Backward is AllToAll's.
struct AllToAllStart : torch::autograd::Function<AllToAllStart> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, int64_t group,
                        std::vector<int64_t> send, std::vector<int64_t> recv, int64_t pending) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    auto& slot = *reinterpret_cast<std::shared_ptr<ProcessGroup::PendingAllToAll>*>(pending);
    slot = reinterpret_cast<ExpertParallelGroup*>(group)->group().all_to_all_start(x, send, recv);
    return slot->output();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    variable_list g = AllToAll::backward(ctx, std::move(grad));
    g.push_back(Tensor());
    return g;
  }
};

// Identity whose backward tells the BackwardComm that an MoE layer's combine is computing.
struct CombineMarker : torch::autograd::Function<CombineMarker> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto* g = reinterpret_cast<ExpertParallelGroup*>(ctx->saved_data["group"].toInt());
    if (BackwardComm* comm = g->backward_comm()) comm->combine_begins();
    return {grad[0], Tensor()};
  }
};

std::string ranks_name(const std::string& kind, const std::vector<int>& ranks) {
  std::string s = kind;
  for (int r : ranks) {
    s += '_';
    s += std::to_string(r);
  }
  s += '/';
  return s;
}

}  // namespace

ParallelLayout::ParallelLayout(int world_size, int ep_size, int r)
    : world(world_size), ep(ep_size), rank(r) {
  if (ep < 1 || world < 1 || world % ep != 0) {
    throw InputError("parallel.ep = " + std::to_string(ep) + " does not divide the " +
                     std::to_string(world) +
                     " ranks (run under streamrl launch --nproc N, N a multiple of ep)");
  }
}

std::vector<int> ParallelLayout::expert_group() const {
  std::vector<int> g;
  for (int e = 0; e < ep; ++e) g.push_back(dp_rank() * ep + e);
  return g;
}

std::vector<int> ParallelLayout::replica_group() const {
  std::vector<int> g;
  for (int d = 0; d < dp(); ++d) g.push_back(d * ep + ep_rank());
  return g;
}

Tensor ExpertParallelGroup::all_to_all(const Tensor& x, const std::vector<int64_t>& send,
                                       const std::vector<int64_t>& recv) {
  if (!x.requires_grad()) return group_->all_to_all(x, send, recv);
  return AllToAll::apply(x, reinterpret_cast<int64_t>(this), send, recv);
}

model::ExpertExchange::Pending ExpertParallelGroup::all_to_all_start(
    const Tensor& x, const std::vector<int64_t>& send, const std::vector<int64_t>& recv) {
  auto pending = std::make_shared<std::shared_ptr<ProcessGroup::PendingAllToAll>>();
  if (!x.requires_grad()) {
    *pending = group_->all_to_all_start(x, send, recv);
    return [pending] { return (*pending)->wait(); };
  }
  const Tensor out = AllToAllStart::apply(x, reinterpret_cast<int64_t>(this), send, recv,
                                          reinterpret_cast<int64_t>(pending.get()));
  return [pending, out] {
    (*pending)->wait();
    return out;
  };
}

void ExpertParallelGroup::set_chunks(int chunks) {
  if (chunks < 1) throw InputError("parallel.ep_chunks must be >= 1");
  chunks_ = chunks;
}

Tensor ExpertParallelGroup::combine_output(const Tensor& out) {
  if (!out.requires_grad()) return out;
  return CombineMarker::apply(out, reinterpret_cast<int64_t>(this));
}

ExpertDataParallel::ExpertDataParallel(ProcessGroup& world, int ep)
    : world_(world), layout_(world.world_size(), ep, world.rank()) {
  // Every rank builds its expert group first, then its replica group, so no rank waits in one
  // rendezvous for a peer that is still in the other.
  experts_ = std::make_shared<ExpertParallelGroup>(
      world.subgroup(layout_.expert_group(), ranks_name("ep", layout_.expert_group())));
  replicas_ = world.subgroup(layout_.replica_group(), ranks_name("dp", layout_.replica_group()));
}

namespace {

std::vector<Tensor> select(const torch::OrderedDict<std::string, Tensor>& parameters,
                           bool experts) {
  std::vector<Tensor> out;
  for (const auto& p : parameters) {
    if (model::is_expert_parameter(p.key()) == experts) out.push_back(p.value());
  }
  return out;
}

}  // namespace

void ExpertDataParallel::all_reduce_gradients(
    const torch::OrderedDict<std::string, Tensor>& parameters, int64_t chunk_bytes, bool shared) {
  if (shared) dist::all_reduce_gradients(world_, select(parameters, false), chunk_bytes);
  dist::all_reduce_gradients(*replicas_, select(parameters, true), chunk_bytes);
}

void ExpertDataParallel::gather_model(torch::nn::Module& sharded, torch::nn::Module* whole) {
  if (layout_.dp_rank() != 0) return;
  gather_experts(sharded, whole, /*everywhere=*/false);
}

void ExpertDataParallel::all_gather_model(torch::nn::Module& sharded, torch::nn::Module& whole) {
  gather_experts(sharded, &whole, /*everywhere=*/true);
}

void ExpertDataParallel::gather_experts(torch::nn::Module& sharded, torch::nn::Module* whole,
                                        bool everywhere) {
  torch::NoGradGuard no_grad;
  ProcessGroup& group = experts_->group();
  // Each rank's expert parameters by name, in its own order; its tensors follow, tagged by index.
  std::string names;
  std::vector<Tensor> mine;
  for (const auto& p : sharded.named_parameters()) {
    if (!model::is_expert_parameter(p.key())) continue;
    names += p.key() + '\n';
    mine.push_back(p.value());
  }
  const std::vector<std::string> all = group.all_gather_bytes(names);
  const auto receives = [everywhere](int rank) { return everywhere || rank == 0; };
  for (int r = 0; r < group.world_size(); ++r) {
    if (r == group.rank() || !receives(r)) continue;
    for (size_t i = 0; i < mine.size(); ++i) group.send(mine[i], r, static_cast<int>(i));
  }
  if (receives(group.rank())) {
    auto full = whole->named_parameters();
    for (const auto& p : sharded.named_parameters()) {
      Tensor* t = full.find(p.key());
      if (t == nullptr) throw RuntimeFailure("gather_model: the whole model has no " + p.key());
      t->copy_(p.value());
    }
    for (int r = 0; r < group.world_size(); ++r) {
      if (r == group.rank()) continue;
      std::istringstream in(all[static_cast<size_t>(r)]);
      int tag = 0;
      for (std::string name; std::getline(in, name); ++tag) {
        Tensor* t = full.find(name);
        if (t == nullptr) throw RuntimeFailure("gather_model: the whole model has no " + name);
        t->copy_(group.recv(t->sizes(), t->options(), r, tag));
      }
    }
  }
  group.wait_sends();
}

double ExpertDataParallel::sum_over_expert_group(double value) {
  return experts_->group().all_reduce_sum(std::vector<double>{value})[0];
}

int64_t ExpertDataParallel::max_over_expert_group(int64_t value) {
  ProcessGroup& group = experts_->group();
  std::vector<double> all(static_cast<size_t>(group.world_size()), 0.0);
  all[static_cast<size_t>(group.rank())] = static_cast<double>(value);
  all = group.all_reduce_sum(all);
  return static_cast<int64_t>(*std::max_element(all.begin(), all.end()));
}

std::unique_ptr<BackwardComm> ExpertDataParallel::backward_comm(
    const torch::OrderedDict<std::string, Tensor>& parameters, const ep::SchedulerOptions& options,
    std::chrono::milliseconds timeout) {
  auto comm = std::make_unique<BackwardComm>(world_, select(parameters, false), options, timeout);
  experts_->set_backward_comm(comm.get());
  comm->on_close([experts = experts_] { experts->set_backward_comm(nullptr); });
  return comm;
}

}  // namespace streamrl::dist
