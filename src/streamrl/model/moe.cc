#include "streamrl/model/moe.h"

#include <algorithm>

#include "streamrl/core/errors.h"

namespace streamrl::model {
namespace {

using torch::Tensor;

torch::nn::Linear linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

}  // namespace

Gating parse_gating(const std::string& name) {
  if (name == "topk") return Gating::kTopK;
  if (name == "top1") return Gating::kTop1;
  if (name == "adaptive") return Gating::kAdaptive;
  throw InputError("gating '" + name + "' is not one of topk, top1, adaptive");
}

std::string gating_name(Gating g) {
  switch (g) {
    case Gating::kTopK:
      return "topk";
    case Gating::kTop1:
      return "top1";
    case Gating::kAdaptive:
      return "adaptive";
  }
  return "?";
}

Routing route(const Tensor& probs, int64_t k, bool normalise, const GatingConfig& gating) {
  const int64_t E = probs.size(-1);
  const int64_t K = gating.kind == Gating::kTopK ? k : gating.kind == Gating::kTop1 ? 1 : 2;
  TORCH_CHECK(K >= 1 && K <= E, "route: ", K, " experts per token out of ", E);
  auto [top_p, top_e] = probs.topk(K, -1);  // descending
  Routing r;
  r.expert = top_e;
  r.used = torch::ones_like(top_e, torch::kBool);
  if (gating.kind == Gating::kAdaptive) {
    // Ambiguous tokens (a small normalised gap between the top two) take both experts.
    Tensor p1 = top_p.select(1, 0), p2 = top_p.select(1, 1);
    Tensor two = (p1 - p2) / (p1 + p2) <= gating.threshold;
    r.used.select(1, 1).copy_(two);
  }
  Tensor w = top_p.masked_fill(~r.used, 0.0);
  if (normalise) w = w / w.sum(-1, /*keepdim=*/true);
  r.weight = w;
  return r;
}

Tensor MoeBlockImpl::Expert::forward(const Tensor& x) {
  return down->forward(torch::silu(gate->forward(x)) * up->forward(x));
}

std::string MoeBlockImpl::module_name(const ModelConfig& c) {
  return c.model_type == "mixtral" ? "block_sparse_moe" : "mlp";
}

MoeBlockImpl::MoeBlockImpl(const ModelConfig& c)
    : k_(c.num_experts_per_tok), normalise_(c.norm_topk_prob), num_experts_(c.num_experts) {
  const int64_t d = c.hidden_size, f = c.moe_intermediate_size;
  const bool mixtral = c.model_type == "mixtral";
  router_ = register_module("gate", linear(d, c.num_experts));
  // A plain module named by expert index (not a ModuleList), so expert parallelism can drop the
  // experts another rank holds and the rest keep their global names.
  expert_modules_ = register_module("experts", std::make_shared<torch::nn::Module>());
  for (int64_t i = 0; i < c.num_experts; ++i) {
    auto m = std::make_shared<torch::nn::Module>();
    Expert e;
    // Mixtral: w1 gate, w3 up, w2 down.
    e.gate = m->register_module(mixtral ? "w1" : "gate_proj", linear(d, f));
    e.up = m->register_module(mixtral ? "w3" : "up_proj", linear(d, f));
    e.down = m->register_module(mixtral ? "w2" : "down_proj", linear(f, d));
    expert_modules_->register_module(std::to_string(i), m);
    experts_.push_back(e);
  }
  if (c.shared_expert_intermediate_size > 0) {
    const int64_t s = c.shared_expert_intermediate_size;
    auto m = register_module("shared_expert", std::make_shared<torch::nn::Module>());
    shared_expert_.gate = m->register_module("gate_proj", linear(d, s));
    shared_expert_.up = m->register_module("up_proj", linear(d, s));
    shared_expert_.down = m->register_module("down_proj", linear(s, d));
    shared_gate_ = register_module("shared_expert_gate", linear(d, 1));
  }
}

Tensor routing_ids(const Routing& r) { return r.expert.masked_fill(~r.used, -1); }

Routing MoeBlockImpl::route_tokens(const Tensor& x, const GatingConfig& gating,
                                   MoeLayerTrace* trace, const Tensor& forced, bool apply) {
  Tensor logits = router_->forward(x);
  Tensor probs = torch::softmax(logits.to(torch::kFloat32), -1);
  // Routing decisions are not differentiated; the combine weights are (through probs).
  Routing r;
  int64_t replayed = 0, differed = 0;
  {
    torch::NoGradGuard no_grad;
    r = route(probs.detach(), k_, normalise_, gating);
    if (forced.defined()) {
      TORCH_CHECK(forced.dim() == 2 && forced.size(0) == x.size(0),
                  "routing replay: forced routing must be [N, K], got ", forced.sizes());
      Tensor own = routing_ids(r);
      const int64_t K = std::max(own.size(1), forced.size(1));
      auto widen = [&](const Tensor& t) {
        return t.size(1) == K
                   ? t
                   : torch::cat({t, torch::full({t.size(0), K - t.size(1)}, -1, t.options())}, 1);
      };
      own = widen(own);
      Tensor f = widen(forced.to(torch::kLong));
      const Tensor take = f.select(1, 0) >= 0;  // rows the other side routed
      // Same set of experts, in any order.
      const Tensor same = (std::get<0>(own.sort(1)) == std::get<0>(f.sort(1))).all(1);
      replayed = take.sum().item<int64_t>();
      differed = (take & ~same).sum().item<int64_t>();
      if (apply) {
        Tensor ids = torch::where(take.unsqueeze(1), f, own);
        r.used = ids >= 0;
        r.expert = ids.clamp_min(0);
      }
    }
  }
  Tensor chosen = probs.gather(1, r.expert).masked_fill(~r.used, 0.0);
  r.weight = normalise_ ? chosen / chosen.sum(-1, /*keepdim=*/true) : chosen;
  if (trace) *trace = MoeLayerTrace{logits, probs, r, replayed, differed};
  return r;
}

Tensor MoeBlockImpl::shared(const Tensor& x) {
  if (!shared_gate_) return Tensor();
  return shared_expert_.forward(x) * torch::sigmoid(shared_gate_->forward(x));
}

Tensor MoeBlockImpl::forward(const Tensor& x, const GatingConfig& gating, MoeLayerTrace* trace,
                             const Tensor& forced, bool apply) {
  const Routing r = route_tokens(x, gating, trace, forced, apply);
  const int64_t N = x.size(0), K = r.expert.size(1);
  // The used (token, expert) pairs, sorted by expert: each expert's tokens are one slice.
  Tensor token = torch::arange(N, x.options().dtype(torch::kLong)).repeat_interleave(K);
  Tensor used = r.used.reshape({-1});
  Tensor pick = used.nonzero().squeeze(1);
  Tensor expert = r.expert.reshape({-1}).index_select(0, pick);
  token = token.index_select(0, pick);
  Tensor weight = r.weight.reshape({-1}).index_select(0, pick);
  Tensor order = expert.argsort();
  token = token.index_select(0, order);
  weight = weight.index_select(0, order);
  const Tensor counts = torch::bincount(expert, {}, num_experts_);

  // One gather of the routed rows in expert order, the experts on their contiguous slices, one
  // weighted scatter back: no per-expert copies of the whole output. The scatter runs even with
  // no rows, so under expert parallelism every rank's backward reaches the combine exchange.
  const Tensor rows = x.index_select(0, token);
  const Tensor y = exchange_ ? run_experts_parallel(rows, counts) : run_experts(rows, counts);
  Tensor out =
      torch::zeros_like(x).index_add(0, token, y * weight.unsqueeze(1).to(x.scalar_type()));
  if (exchange_) out = exchange_->combine_output(out);
  if (Tensor s = shared(x); s.defined()) out = out + s;
  return out;
}

Tensor MoeBlockImpl::run_experts(const Tensor& rows, const Tensor& counts) {
  const Tensor host = counts.cpu();  // the slice sizes (one small copy per layer off the CPU)
  const int64_t* count = host.data_ptr<int64_t>();
  std::vector<Tensor> ys;
  int64_t offset = 0;
  for (size_t e = 0; e < experts_.size(); ++e) {
    const int64_t n = count[e];
    if (n == 0) continue;
    ys.push_back(experts_[e].forward(rows.narrow(0, offset, n)));
    offset += n;
  }
  return ys.empty() ? rows : torch::cat(ys);
}

namespace {

// Rows [lo, hi) of chunk c when n rows are cut into `chunks` nearly equal parts; every rank cuts a
// segment it sends and the peer cuts the same segment it receives by this one rule.
std::pair<int64_t, int64_t> chunk_span(int64_t n, int c, int chunks) {
  return {n * c / chunks, n * (c + 1) / chunks};
}

}  // namespace

Tensor MoeBlockImpl::run_experts_parallel(const Tensor& rows, const Tensor& counts) {
  const int ranks = exchange_->size(), chunks = exchange_->chunks();
  const int64_t local = static_cast<int64_t>(experts_.size());
  // Every source's count per local expert (an equal-split exchange of the counts), then the rows
  // themselves, in `chunks` exchanges each way (Lina's pipelining; usually one).
  const std::vector<int64_t> each(ranks, local);
  const Tensor got = exchange_->all_to_all(counts, each, each).view({ranks, local});
  const Tensor by_rank = counts.view({ranks, local}).sum(1);
  const int64_t* sent = by_rank.data_ptr<int64_t>();
  const Tensor got_c = got.contiguous();
  const int64_t* g = got_c.data_ptr<int64_t>();
  // Chunk c carries the c-th part of every (this rank -> peer) segment. Its rows are gathered
  // from `rows`; the peer learns each local expert's share of its part from `got` (a source's
  // rows are sorted by expert).
  std::vector<Tensor> gather(chunks), local_id(chunks);
  std::vector<std::vector<int64_t>> send(chunks, std::vector<int64_t>(ranks)),
      recv(chunks, std::vector<int64_t>(ranks));
  std::vector<std::vector<int64_t>> expert_rows(chunks, std::vector<int64_t>(local, 0));
  for (int c = 0; c < chunks; ++c) {
    std::vector<Tensor> idx;
    std::vector<int64_t> ids;
    int64_t offset = 0;
    for (int r = 0; r < ranks; ++r) {
      const auto [lo, hi] = chunk_span(sent[r], c, chunks);
      idx.push_back(torch::arange(offset + lo, offset + hi, torch::kLong));
      send[c][r] = hi - lo;
      offset += sent[r];
      int64_t from = 0, total = 0;
      for (int64_t e = 0; e < local; ++e) total += g[r * local + e];
      const auto [rlo, rhi] = chunk_span(total, c, chunks);
      recv[c][r] = rhi - rlo;
      for (int64_t e = 0; e < local; ++e) {
        const int64_t to = from + g[r * local + e];
        const int64_t n = std::max<int64_t>(0, std::min(to, rhi) - std::max(from, rlo));
        ids.insert(ids.end(), n, e);
        expert_rows[c][e] += n;
        from = to;
      }
    }
    gather[c] = torch::cat(idx);
    local_id[c] = torch::tensor(ids, torch::kLong);
  }
  // Dispatch c + 1 travels while the experts compute on chunk c; combine c travels while the
  // experts compute on chunk c + 1. Every rank starts the exchanges in the same order.
  using Pending = ExpertExchange::Pending;
  std::vector<Pending> dispatched(chunks), combined(chunks);
  auto dispatch = [&](int c) {
    dispatched[c] = exchange_->all_to_all_start(rows.index_select(0, gather[c]), send[c], recv[c]);
  };
  dispatch(0);
  for (int c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) dispatch(c + 1);
    const Tensor received = dispatched[c]();
    // Received rows come by source, each source's sorted by expert: sort them by local expert
    // (stable), run the experts, restore the order and send the results back.
    const Tensor order = std::get<1>(local_id[c].sort(/*stable=*/c10::optional<bool>(true), 0));
    const Tensor y =
        run_experts(received.index_select(0, order), torch::tensor(expert_rows[c], torch::kLong));
    combined[c] = exchange_->all_to_all_start(y.index_select(0, order.argsort()), recv[c], send[c]);
  }
  std::vector<Tensor> back;
  for (int c = 0; c < chunks; ++c) back.push_back(combined[c]());
  // Each chunk's results in the rows it gathered them from.
  return torch::zeros_like(rows).index_copy(0, torch::cat(gather), torch::cat(back));
}

void MoeBlockImpl::shard_experts(std::shared_ptr<ExpertExchange> exchange) {
  if (exchange_) throw InputError("expert parallelism: the experts are already sharded");
  const int ranks = exchange->size(), rank = exchange->rank();
  if (ranks < 1 || num_experts_ % ranks != 0) {
    throw InputError("expert parallelism: " + std::to_string(num_experts_) +
                     " experts do not divide evenly over " + std::to_string(ranks) + " ranks");
  }
  const int64_t local = num_experts_ / ranks;
  first_expert_ = rank * local;
  for (int64_t i = 0; i < num_experts_; ++i) {
    if (i < first_expert_ || i >= first_expert_ + local)
      expert_modules_->unregister_module(std::to_string(i));
  }
  experts_ = std::vector<Expert>(experts_.begin() + first_expert_,
                                 experts_.begin() + first_expert_ + local);
  exchange_ = std::move(exchange);
}

int shard_experts(torch::nn::Module& model, const std::shared_ptr<ExpertExchange>& exchange) {
  int n = 0;
  for (const auto& m : model.modules(/*include_self=*/true)) {
    if (auto* block = dynamic_cast<MoeBlockImpl*>(m.get())) {
      block->shard_experts(exchange);
      ++n;
    }
  }
  return n;
}

bool is_expert_parameter(const std::string& name) {
  return name.rfind("experts.", 0) == 0 || name.find(".experts.") != std::string::npos;
}

Tensor MoeBlockImpl::forward_dense_reference(const Tensor& x, const GatingConfig& gating) {
  if (exchange_) throw InputError("forward_dense_reference needs all experts on one rank");
  const Routing r = route_tokens(x, gating, nullptr);
  // [N, E] combine weights, zero for experts a token does not use.
  Tensor w = torch::zeros({x.size(0), static_cast<int64_t>(experts_.size())},
                          x.options().dtype(torch::kFloat32))
                 .scatter_add(1, r.expert, r.weight);
  Tensor out = torch::zeros_like(x);
  for (size_t e = 0; e < experts_.size(); ++e) {
    out = out + experts_[e].forward(x) * w.select(1, static_cast<int64_t>(e)).unsqueeze(1);
  }
  if (Tensor s = shared(x); s.defined()) out = out + s;
  return out;
}

MoeAuxLosses moe_aux_losses(const std::vector<MoeLayerTrace>& traces, const Tensor& valid,
                            int64_t num_experts) {
  MoeAuxLosses a;
  a.load_balance = torch::zeros({});
  a.load_balance_top1 = torch::zeros({});
  a.z_loss = torch::zeros({});
  const Tensor flat_valid = valid.reshape({-1});
  const Tensor rows = flat_valid.nonzero().squeeze(1);
  const auto f32 = valid.options().dtype(torch::kFloat32);  // the trace's device
  const double n = std::max<int64_t>(1, rows.size(0));
  // Statistics (no gradient) gathered per layer as tensors and read back once at the end.
  std::vector<Tensor> two_share, load, by_row;
  for (const auto& t : traces) {
    const Tensor probs = t.probs.index_select(0, rows);
    const Tensor experts = t.routing.expert.index_select(0, rows);
    const Tensor used = t.routing.used.index_select(0, rows);
    const Tensor mean_prob = probs.sum(0) / n;  // P_e
    // f_e: share of the token-expert assignments (all chosen experts), and of top-1 choices.
    const Tensor assigned =
        torch::zeros({num_experts}, f32)
            .index_add(0, experts.reshape({-1}), used.reshape({-1}).to(torch::kFloat32));
    const Tensor top1 =
        torch::zeros({num_experts}, f32)
            .index_add(0, experts.select(1, 0), torch::ones({experts.size(0)}, f32));
    a.load_balance = a.load_balance + num_experts * (assigned / n * mean_prob).sum();
    a.load_balance_top1 = a.load_balance_top1 + num_experts * (top1 / n * mean_prob).sum();
    const Tensor lse = torch::logsumexp(t.logits.index_select(0, rows).to(torch::kFloat32), -1);
    a.z_loss = a.z_loss + lse.square().sum() / n;
    a.replayed += t.replayed;
    a.differed += t.differed;
    const Tensor two = (t.routing.used.sum(1) >= 2) & flat_valid;  // [N]
    two_share.push_back(two.sum().to(torch::kFloat64) / n);
    load.push_back(
        (assigned.max() / (assigned.sum() / num_experts).clamp_min(1e-12)).to(torch::kFloat64));
    if (valid.dim() == 2) by_row.push_back(two.view(valid.sizes()).sum(1).to(torch::kFloat32));
  }
  if (traces.empty()) return a;
  const Tensor shares = torch::stack(two_share).cpu(), loads = torch::stack(load).cpu();
  a.two_expert_share.assign(shares.data_ptr<double>(), shares.data_ptr<double>() + shares.numel());
  a.expert_load.assign(loads.data_ptr<double>(), loads.data_ptr<double>() + loads.numel());
  if (valid.dim() == 2) {
    const Tensor per_row = valid.sum(1).clamp_min(1).to(torch::kFloat32).unsqueeze(1);
    a.two_expert_by_row = torch::stack(by_row, 1) / per_row;
  }
  return a;
}

void MoeStats::add(const MoeAuxLosses& aux, bool aux_top1_only, int64_t tokens) {
  const double w = static_cast<double>(tokens);
  const size_t first = static_cast<size_t>(aux.first_layer), L = aux.two_expert_share.size();
  const size_t size = std::max(layer_tokens_.size(), first + L);
  two_expert_share_.resize(size, 0.0);
  expert_load_.resize(size, 0.0);
  layer_tokens_.resize(size, 0.0);
  for (size_t l = 0; l < L; ++l) {
    two_expert_share_[first + l] += aux.two_expert_share[l] * w;
    expert_load_[first + l] += aux.expert_load[l] * w;
    layer_tokens_[first + l] += w;
  }
  const Tensor lb = (aux_top1_only ? aux.load_balance_top1 : aux.load_balance).detach() * w;
  const Tensor z = aux.z_loss.detach() * w;
  aux_loss_ = aux_loss_.defined() ? aux_loss_ + lb : lb;
  z_loss_ = z_loss_.defined() ? z_loss_ + z : z;
  replayed_ += aux.replayed;
  differed_ += aux.differed;
}

void MoeStats::merge(const MoeStats& o) {
  const size_t size = std::max(layer_tokens_.size(), o.layer_tokens_.size());
  two_expert_share_.resize(size, 0.0);
  expert_load_.resize(size, 0.0);
  layer_tokens_.resize(size, 0.0);
  for (size_t l = 0; l < o.layer_tokens_.size(); ++l) {
    two_expert_share_[l] += o.two_expert_share_[l];
    expert_load_[l] += o.expert_load_[l];
    layer_tokens_[l] += o.layer_tokens_[l];
  }
  if (o.aux_loss_.defined())
    aux_loss_ = aux_loss_.defined() ? aux_loss_ + o.aux_loss_ : o.aux_loss_;
  if (o.z_loss_.defined()) z_loss_ = z_loss_.defined() ? z_loss_ + o.z_loss_ : o.z_loss_;
  replayed_ += o.replayed_;
  differed_ += o.differed_;
}

std::vector<double> MoeStats::to_values(size_t layers) const {
  std::vector<double> v(3 * layers, 0.0);
  for (size_t l = 0; l < std::min(layers, layer_tokens_.size()); ++l) {
    v[l] = two_expert_share_[l];
    v[layers + l] = expert_load_[l];
    v[2 * layers + l] = layer_tokens_[l];
  }
  v.push_back(aux_loss_.defined() ? aux_loss_.item<double>() : 0.0);
  v.push_back(z_loss_.defined() ? z_loss_.item<double>() : 0.0);
  v.push_back(static_cast<double>(replayed_));
  v.push_back(static_cast<double>(differed_));
  return v;
}

MoeStats MoeStats::from_values(const std::vector<double>& v) {
  if (v.size() < 4 || (v.size() - 4) % 3 != 0) {
    throw InputError("MoE statistics: " + std::to_string(v.size()) + " values is no layer count");
  }
  const size_t L = (v.size() - 4) / 3;
  MoeStats s;
  s.two_expert_share_.assign(v.begin(), v.begin() + L);
  s.expert_load_.assign(v.begin() + L, v.begin() + 2 * L);
  s.layer_tokens_.assign(v.begin() + 2 * L, v.begin() + 3 * L);
  s.aux_loss_ = torch::tensor(v[3 * L], torch::kFloat64);
  s.z_loss_ = torch::tensor(v[3 * L + 1], torch::kFloat64);
  s.replayed_ = std::llround(v[3 * L + 2]);
  s.differed_ = std::llround(v[3 * L + 3]);
  return s;
}

bool MoeStats::empty() const {
  return std::none_of(layer_tokens_.begin(), layer_tokens_.end(), [](double t) { return t > 0; });
}

nlohmann::json MoeStats::to_json(bool routing) const {
  // Every micro-batch passes every MoE layer: the busiest layer's tokens are the step's.
  double n = 1;
  for (double t : layer_tokens_) n = std::max(n, t);
  std::vector<double> share = two_expert_share_, load = expert_load_;
  for (size_t l = 0; l < layer_tokens_.size(); ++l) {
    const double t = std::max(1.0, layer_tokens_[l]);
    share[l] /= t;
    load[l] /= t;
  }
  nlohmann::json j = {{"two_expert_share", share},
                      {"expert_load", load},
                      {"aux_loss", aux_loss_.defined() ? aux_loss_.item<double>() / n : 0.0},
                      {"z_loss", z_loss_.defined() ? z_loss_.item<double>() / n : 0.0}};
  if (routing) {
    j["routing_mismatch"] =
        replayed_ > 0
            ? nlohmann::json(static_cast<double>(differed_) / static_cast<double>(replayed_))
            : nlohmann::json(nullptr);
  }
  return j;
}

void MoeOptions::read(const core::Config& section) {
  std::string gating_text = gating_name(gating.kind), aux = aux_top1_only ? "top1" : "switch";
  section.get("gating", gating_text);
  section.get("threshold", gating.threshold);
  section.get("aux_loss", aux);
  section.get("aux_loss_coef", aux_loss_coef);
  section.get("z_loss_coef", z_loss_coef);
  const std::string key = section.prefix().empty() ? "" : section.prefix() + ".";
  const std::string at = "config key '" + key;
  try {
    gating.kind = parse_gating(gating_text);
  } catch (const InputError& e) {
    throw InputError(at + "gating': " + e.what());
  }
  if (aux != "switch" && aux != "top1") {
    throw InputError(at + "aux_loss': '" + aux + "' is not one of switch, top1");
  }
  aux_top1_only = aux == "top1";
  if (!(gating.threshold >= 0 && gating.threshold <= 1)) {
    throw InputError(at + "threshold' must be in [0, 1]");
  }
  if (!(aux_loss_coef >= 0) || !(z_loss_coef >= 0)) {
    throw InputError(at + "aux_loss_coef' and '" + key + "z_loss_coef' must be >= 0");
  }
}

Tensor MoeOptions::loss(const std::optional<MoeAuxLosses>& aux) const {
  Tensor total = torch::zeros({});
  if (!aux) return total;
  if (aux_loss_coef > 0) {
    total = total + aux_loss_coef * (aux_top1_only ? aux->load_balance_top1 : aux->load_balance);
  }
  if (z_loss_coef > 0) total = total + z_loss_coef * aux->z_loss;
  return total;
}

}  // namespace streamrl::model
