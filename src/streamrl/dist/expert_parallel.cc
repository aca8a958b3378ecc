#include "streamrl/dist/expert_parallel.h"

#include <cstdint>

#include "streamrl/core/errors.h"

namespace streamrl::dist {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The exchange as an autograd function: the rows this rank sent get the gradient of the rows the
// others computed from them, which travels back by the reverse splits.
struct AllToAll : torch::autograd::Function<AllToAll> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, int64_t group,
                        std::vector<int64_t> send, std::vector<int64_t> recv) {
    ctx->saved_data["group"] = group;  // the ProcessGroup outlives every graph built through it
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return reinterpret_cast<ProcessGroup*>(group)->all_to_all(x, send, recv);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto* g = reinterpret_cast<ProcessGroup*>(ctx->saved_data["group"].toInt());
    const Tensor back = g->all_to_all(grad[0].contiguous(), ctx->saved_data["recv"].toIntVector(),
                                      ctx->saved_data["send"].toIntVector());
    return {back, Tensor(), Tensor(), Tensor()};
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
                     std::to_string(world) + " trainer ranks");
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
  return AllToAll::apply(x, reinterpret_cast<int64_t>(group_.get()), send, recv);
}

ExpertDataParallel::ExpertDataParallel(ProcessGroup& world, int ep)
    : world_(world), layout_(world.world_size(), ep, world.rank()) {
  // Every rank builds its expert group first, then its replica group, so no rank waits in one
  // rendezvous for a peer that is still in the other.
  experts_ = std::make_shared<ExpertParallelGroup>(
      world.subgroup(layout_.expert_group(), ranks_name("ep", layout_.expert_group())));
  replicas_ = world.subgroup(layout_.replica_group(), ranks_name("dp", layout_.replica_group()));
}

void ExpertDataParallel::all_reduce_gradients(
    const torch::OrderedDict<std::string, Tensor>& parameters, int64_t chunk_bytes) {
  std::vector<Tensor> shared, experts;
  for (const auto& p : parameters) {
    (model::is_expert_parameter(p.key()) ? experts : shared).push_back(p.value());
  }
  dist::all_reduce_gradients(world_, shared, chunk_bytes);
  dist::all_reduce_gradients(*replicas_, experts, chunk_bytes);
}

}  // namespace streamrl::dist
