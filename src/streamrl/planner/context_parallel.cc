#include "streamrl/planner/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

using nlohmann::json;

// FlashAttention's count: the backward pass does 2.5x the forward's matmul work.
constexpr double kBackwardOverForward = 2.5;
// Forward FLOPs per (query, key) pair and head dimension: QK^T and PV, 2 each.
constexpr double kForwardFlopsPerPairDim = 4;
// Korthikanti et al. 2022: 34·h bytes per token per layer at 16 bits with fused attention.
constexpr double kActivationBytesPerHiddenAt16Bit = 34;
constexpr double kIndexBytes = 4;         // int32 key index
constexpr double kDefaultLatencyUs = 10;  // per collective, NCCL-like

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

std::vector<double> resolved_sparsity(const CpLayer& l) {
  if (l.sparsity.empty()) return std::vector<double>(l.heads, 0.0);
  if (l.sparsity.size() == 1) return std::vector<double>(l.heads, l.sparsity[0]);
  return l.sparsity;
}

// Causal (query, key) pairs of the busiest SCP rank, per head.
double busiest_pairs(double s, int c_s, CpSplit split) {
  if (split == CpSplit::kZigzag) return s * s / (2.0 * c_s);
  const double n = s / c_s;
  return (c_s - 0.5) * n * n;
}

// One collective among `group` ranks of which `on_node` (self included) share a node: the busiest
// port's bytes go to peers evenly, its on- and off-node shares move in parallel.
double transfer_s(double bytes, int group, int on_node, const CpDevice& d) {
  if (group <= 1 || bytes <= 0) return 0;
  const double f_on = static_cast<double>(on_node - 1) / (group - 1), f_off = 1 - f_on;
  const double t =
      std::max(bytes * f_on / d.intra.bytes_per_s, bytes * f_off / d.inter.bytes_per_s);
  return t + (f_off > 0 ? d.inter.op_latency_s : d.intra.op_latency_s);
}

// Latency of a round without payload (DSV's lengths exchange).
double round_s(int group, int on_node, const CpDevice& d) {
  if (group <= 1) return 0;
  return on_node < group ? d.inter.op_latency_s : d.intra.op_latency_s;
}

double gb(double bytes) { return bytes / 1e9; }

}  // namespace

CpDevice CpDevice::from_accelerator(const Accelerator& a) {
  CpDevice d;
  d.peak_flops = a.bf16_tflops * 1e12;
  d.intra.bytes_per_s = a.nvlink_gb_s * 1e9;
  d.inter.bytes_per_s = a.network_gb_s * 1e9;
  d.memory_bytes = a.hbm_gb * 1e9 / 2;
  return d;
}

const char* cp_split_name(CpSplit split) {
  return split == CpSplit::kZigzag ? "zigzag" : "contiguous";
}

CpSplit parse_cp_split(const std::string& name) {
  if (name == "zigzag") return CpSplit::kZigzag;
  if (name == "contiguous") return CpSplit::kContiguous;
  throw InputError("unknown context-parallel split '" + name + "' (known: zigzag, contiguous)");
}

const char* cp_placement_name(CpPlacement placement) {
  return placement == CpPlacement::kHcpInner ? "hcp_inner" : "scp_inner";
}

LptResult lpt_assign(const std::vector<double>& weights, int bins) {
  if (bins < 1) throw InputError("LPT needs at least one bin (got " + std::to_string(bins) + ")");
  std::vector<int> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return weights[a] > weights[b]; });
  LptResult r;
  r.bins.assign(bins, {});
  r.loads.assign(bins, 0.0);
  for (int item : order) {
    const int b =
        static_cast<int>(std::min_element(r.loads.begin(), r.loads.end()) - r.loads.begin());
    r.bins[b].push_back(item);
    r.loads[b] += weights[item];
  }
  r.max_load = *std::max_element(r.loads.begin(), r.loads.end());
  return r;
}

void validate_cp(const CpLayer& l, const CpDevice& d) {
  if (l.seq_len < 1) {
    throw InputError("context parallelism: seq_len must be >= 1 (got " + std::to_string(l.seq_len) +
                     ")");
  }
  if (l.heads < 1 || l.kv_heads < 1 || l.head_dim < 1 || l.layers < 1) {
    throw InputError("context parallelism: heads, kv_heads, head_dim and layers must be >= 1");
  }
  if (l.heads % l.kv_heads != 0) {
    throw InputError("context parallelism: heads (" + std::to_string(l.heads) +
                     ") must be a multiple of kv_heads (" + std::to_string(l.kv_heads) + ")");
  }
  if (l.sparsity.size() > 1 && l.sparsity.size() != static_cast<size_t>(l.heads)) {
    throw InputError("context parallelism: sparsity has " + std::to_string(l.sparsity.size()) +
                     " values; give one or one per head (" + std::to_string(l.heads) + ")");
  }
  for (double s : l.sparsity) {
    if (!(s >= 0 && s < 1)) {
      throw InputError("context parallelism: sparsity " + fmt("%g", s) + " is outside [0, 1)");
    }
  }
  if (!(l.bytes_per_element > 0) || !(l.activation_bytes_per_token >= 0) ||
      !(l.matmul_flops_per_token >= 0)) {
    throw InputError(
        "context parallelism: bytes per element must be positive, activation bytes and matmul "
        "FLOPs non-negative");
  }
  auto unit = [](double x) { return x > 0 && x <= 1; };
  if (!(d.peak_flops > 0) || !unit(d.attention_efficiency) || !unit(d.sparse_efficiency) ||
      !unit(d.matmul_efficiency) || !(d.intra.bytes_per_s > 0) || !(d.inter.bytes_per_s > 0) ||
      !(d.intra.op_latency_s >= 0) || !(d.inter.op_latency_s >= 0) || d.node_size < 1 ||
      !(d.memory_bytes > 0)) {
    throw InputError(
        "context parallelism: the device needs positive peak, bandwidths and memory, "
        "efficiencies in (0, 1], latencies >= 0 and node_size >= 1");
  }
}

std::vector<double> head_costs(const CpLayer& l, const CpDevice& d) {
  std::vector<double> c;
  for (double s : resolved_sparsity(l)) {
    c.push_back(s == 0 ? 1.0 : std::min(1.0, (1 - s) / d.sparse_efficiency));
  }
  return c;
}

CpOption cost_cp_option(const CpLayer& l, const CpDevice& d, int c_h, int c_s,
                        CpPlacement placement, CpSplit split) {
  validate_cp(l, d);
  if (c_h < 1 || c_s < 1) {
    throw InputError("context parallelism: degrees must be >= 1 (got " + std::to_string(c_h) +
                     " x " + std::to_string(c_s) + ")");
  }
  CpOption o;
  o.c_h = c_h;
  o.c_s = c_s;
  o.placement = placement;
  if (c_h > l.heads) {
    o.feasible = false;
    o.infeasible_reason = "C_h = " + std::to_string(c_h) + " exceeds the " +
                          std::to_string(l.heads) + " query heads (HCP gives ranks whole heads)";
    return o;
  }
  const double S = static_cast<double>(l.seq_len), D = l.head_dim, b = l.bytes_per_element;
  const int group = l.heads / l.kv_heads;
  const std::vector<double> sparsity = resolved_sparsity(l), cost = head_costs(l, d);

  // 1. Heads to HCP ranks: LPT over whole KV groups while there are enough of them (K/V stay
  // unreplicated), else over query heads with each rank receiving the KV heads it needs.
  o.head_units_are_kv_groups = l.kv_heads >= c_h;
  const int units = o.head_units_are_kv_groups ? l.kv_heads : l.heads;
  const int heads_per_unit = o.head_units_are_kv_groups ? group : 1;
  std::vector<double> unit_cost(units, 0.0);
  for (int h = 0; h < l.heads; ++h) unit_cost[h / heads_per_unit] += cost[h];
  const LptResult lpt = lpt_assign(unit_cost, c_h);
  o.heads_per_rank.assign(c_h, {});
  for (int r = 0; r < c_h; ++r) {
    for (int u : lpt.bins[r]) {
      for (int k = 0; k < heads_per_unit; ++k)
        o.heads_per_rank[r].push_back(u * heads_per_unit + k);
    }
    std::sort(o.heads_per_rank[r].begin(), o.heads_per_rank[r].end());
  }
  o.max_load = lpt.max_load;
  o.mean_load = std::accumulate(cost.begin(), cost.end(), 0.0) / c_h;
  std::vector<double> naive(c_h, 0.0);
  for (int u = 0; u < units; ++u) naive[static_cast<int64_t>(u) * c_h / units] += unit_cost[u];
  o.naive_max_load = *std::max_element(naive.begin(), naive.end());

  // Each rank's query heads, KV heads and their sparsity (a KV head serves the least sparse of the
  // rank's query heads that share it).
  std::vector<int> q(c_h);
  std::vector<std::vector<double>> kv_sparsity(c_h);
  for (int r = 0; r < c_h; ++r) {
    q[r] = static_cast<int>(o.heads_per_rank[r].size());
    std::vector<double> by_kv(l.kv_heads, 2.0);
    for (int h : o.heads_per_rank[r]) by_kv[h / group] = std::min(by_kv[h / group], sparsity[h]);
    for (double s : by_kv) {
      if (s <= 1) kv_sparsity[r].push_back(s);
    }
  }

  // 2. Members of each group that share a node.
  const int node = d.node_size;
  int on_node_h = 1, on_node_s = 1;
  if (placement == CpPlacement::kHcpInner) {
    on_node_h = std::min(c_h, node);
    on_node_s = std::clamp(node / c_h, 1, c_s);
  } else {
    on_node_s = std::min(c_s, node);
    on_node_h = std::clamp(node / c_s, 1, c_h);
  }

  // 3. Compute of the busiest rank, per layer.
  const double flops_per_pair = kForwardFlopsPerPairDim * D * (1 + kBackwardOverForward);
  const double compute = o.max_load * busiest_pairs(S, c_s, split) * flops_per_pair /
                         (d.peak_flops * d.attention_efficiency);

  // 4. HCP: the all-to-alls inside one SCP shard of n_s tokens. A rank takes in its heads of the
  // other ranks' tokens and sends out the other heads of its own tokens.
  double hcp = 0;
  if (c_h > 1) {
    const double n_s = S / c_s, in_tokens = n_s * (c_h - 1) / c_h, out_tokens = n_s / c_h;
    std::vector<double> w_qkv(c_h), w_q(c_h);
    for (int r = 0; r < c_h; ++r) {
      w_q[r] = q[r] * D * b;
      w_qkv[r] = (q[r] + 2.0 * kv_sparsity[r].size()) * D * b;
    }
    auto port = [&](const std::vector<double>& w) {
      const double total = std::accumulate(w.begin(), w.end(), 0.0);
      double m = 0;
      for (double wr : w) m = std::max(m, std::max(in_tokens * wr, out_tokens * (total - wr)));
      return m;
    };
    const double p_qkv = port(w_qkv), p_q = port(w_q);
    // Forward: Q,K,V in, O out; backward: dO in, dQ,dK,dV out.
    o.hcp_bytes = 2 * (p_qkv + p_q);
    hcp = 2 * (transfer_s(p_qkv, c_h, on_node_h, d) + transfer_s(p_q, c_h, on_node_h, d));
  }

  // 5. SCP: the busiest rank gathers the critical part of the earlier shards' K and V.
  double scp = 0, kept_kv = 0;
  if (c_s > 1) {
    const double remote = S * (c_s - 1) / c_s;
    for (int r = 0; r < c_h; ++r) {
      double one = 0, index = 0;  // one of K or V; key indices
      bool sparse = false;
      for (double s : kv_sparsity[r]) {
        one += (1 - s) * remote * D * b;
        if (s > 0) {
          index += (1 - s) * remote * kIndexBytes;
          sparse = true;
        }
      }
      // K, V forward (kept for backward), dK, dV backward; sparse: lengths and index rounds first.
      double t = 4 * transfer_s(one, c_s, on_node_s, d);
      if (sparse) t += round_s(c_s, on_node_s, d) + transfer_s(index, c_s, on_node_s, d);
      scp = std::max(scp, t);
      o.scp_kv_bytes = std::max(o.scp_kv_bytes, 4 * one);
      o.scp_index_bytes = std::max(o.scp_index_bytes, index);
      kept_kv = std::max(kept_kv, 2 * one);
    }
  }

  // 6. The step and the memory per rank.
  const int cp = c_h * c_s;
  o.compute_s = l.layers * compute;
  o.hcp_comm_s = l.layers * hcp;
  o.scp_comm_s = l.layers * scp;
  o.matmul_s = S / cp * l.matmul_flops_per_token / (d.peak_flops * d.matmul_efficiency);
  o.step_s = o.compute_s + o.hcp_comm_s + o.scp_comm_s + o.matmul_s;
  const double act = l.activation_bytes_per_token > 0
                         ? l.activation_bytes_per_token
                         : kActivationBytesPerHiddenAt16Bit * l.heads * D * b / 2;
  o.memory_bytes = l.layers * (S / cp * act + kept_kv);
  o.fits_memory = o.memory_bytes <= d.memory_bytes;
  return o;
}

CpChoice choose_context_parallel(const CpLayer& l, const CpDevice& d, int cp, CpSplit split) {
  validate_cp(l, d);
  if (cp < 1) {
    throw InputError("context parallelism: degree must be >= 1 (got " + std::to_string(cp) + ")");
  }
  CpChoice c;
  c.cp = cp;
  for (int c_h = cp; c_h >= 1; --c_h) {
    if (cp % c_h != 0) continue;
    const int c_s = cp / c_h;
    c.options.push_back(cost_cp_option(l, d, c_h, c_s, CpPlacement::kHcpInner, split));
    // The placement only matters when both kinds of group have more than one rank.
    if (c_h > 1 && c_s > 1) {
      c.options.push_back(cost_cp_option(l, d, c_h, c_s, CpPlacement::kScpInner, split));
    }
  }
  auto pick = [&](bool need_memory) {
    int best = -1;
    for (size_t i = 0; i < c.options.size(); ++i) {
      const CpOption& o = c.options[i];
      if (!o.feasible || (need_memory && !o.fits_memory)) continue;
      if (best < 0 || o.step_s < c.options[best].step_s) best = static_cast<int>(i);
    }
    return best;
  };
  c.best = pick(true);
  if (c.best < 0) c.best = pick(false);
  const CpOption& w = c.options[c.best];  // C_h = 1 is always feasible
  auto name = [](const CpOption& o) { return std::to_string(o.c_h) + "x" + std::to_string(o.c_s); };
  c.reason =
      name(w) +
      (w.c_h > 1 && w.c_s > 1 ? std::string(" ") + cp_placement_name(w.placement) : std::string()) +
      ": " + fmt("%.4g s", w.step_s) + " (attention " + fmt("%.4g", w.compute_s) + ", HCP " +
      fmt("%.4g", w.hcp_comm_s) + ", SCP " + fmt("%.4g", w.scp_comm_s) + ")";
  if (cp > 1) {
    const CpOption& hcp = c.options.front();  // cp x 1
    const CpOption& scp = c.options.back();   // 1 x cp
    c.reason += "; pure HCP " +
                (hcp.feasible ? fmt("%.4g s", hcp.step_s) : "infeasible: " + hcp.infeasible_reason);
    c.reason += ", pure SCP " + fmt("%.4g s", scp.step_s);
  }
  if (!w.fits_memory) {
    c.reason += "; no option fits " + fmt("%.1f GB", gb(d.memory_bytes)) + " per rank";
  }
  return c;
}

CpSizing size_context_parallel(const CpLayer& l, const CpDevice& d, std::vector<int> candidates,
                               double target_step_s, CpSplit split) {
  validate_cp(l, d);
  if (candidates.empty()) throw InputError("context parallelism: no candidate degrees");
  if (!(target_step_s >= 0)) {
    throw InputError("context parallelism: target step time must be >= 0");
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  CpSizing z;
  for (int cp : candidates) z.choices.push_back(choose_context_parallel(l, d, cp, split));
  auto meets = [&](const CpOption& o) {
    return o.fits_memory && (target_step_s <= 0 || o.step_s <= target_step_s);
  };
  auto needs = [&](const CpChoice& ch) {
    const CpOption& o = *ch.chosen();
    std::string s = "needs " + fmt("%.1f GB", gb(o.memory_bytes));
    if (target_step_s > 0) s += " and " + fmt("%.4g s", o.step_s);
    return s;
  };
  auto shortfall = [&](const CpChoice& ch) {
    return "C = " + std::to_string(ch.cp) + " " + needs(ch);
  };
  std::string budget = fmt("%.1f GB per rank", gb(d.memory_bytes));
  if (target_step_s > 0) budget += " and a step within " + fmt("%.4g s", target_step_s);
  for (size_t i = 0; i < z.choices.size(); ++i) {
    if (!meets(*z.choices[i].chosen())) continue;
    z.chosen = static_cast<int>(i);
    z.cp = z.choices[i].cp;
    z.reason = "C = " + std::to_string(z.cp) + " is the smallest candidate within " + budget +
               " (" + needs(z.choices[i]) + ")";
    if (i > 0) z.reason += "; " + shortfall(z.choices[i - 1]);
    return z;
  }
  z.reason = "no candidate up to " + std::to_string(candidates.back()) + " is within " + budget +
             ": " + shortfall(z.choices.back());
  return z;
}

json to_json(const CpOption& o) {
  json j = {{"c_h", o.c_h},
            {"c_s", o.c_s},
            {"placement", cp_placement_name(o.placement)},
            {"feasible", o.feasible}};
  if (!o.feasible) {
    j["reason"] = o.infeasible_reason;
    return j;
  }
  j.update({{"step_s", o.step_s},
            {"attention_s", o.compute_s},
            {"hcp_comm_s", o.hcp_comm_s},
            {"scp_comm_s", o.scp_comm_s},
            {"matmul_s", o.matmul_s},
            {"max_load", o.max_load},
            {"mean_load", o.mean_load},
            {"naive_max_load", o.naive_max_load},
            {"head_units", o.head_units_are_kv_groups ? "kv_group" : "head"},
            {"hcp_bytes_per_layer", o.hcp_bytes},
            {"scp_kv_bytes_per_layer", o.scp_kv_bytes},
            {"scp_index_bytes_per_layer", o.scp_index_bytes},
            {"memory_gb", gb(o.memory_bytes)},
            {"fits_memory", o.fits_memory},
            {"heads_per_rank", o.heads_per_rank}});
  return j;
}

json to_json(const CpChoice& c) {
  json options = json::array();
  for (const CpOption& o : c.options) {
    json j = to_json(o);
    j.erase("heads_per_rank");
    options.push_back(j);
  }
  json j = {{"cp", c.cp}, {"reason", c.reason}, {"options", options}};
  if (c.chosen()) j["chosen"] = to_json(*c.chosen());
  return j;
}

json to_json(const CpSizing& z) {
  json choices = json::array();
  for (const CpChoice& c : z.choices) choices.push_back(to_json(c));
  return {{"cp", z.cp}, {"reason", z.reason}, {"candidates", choices}};
}

ContextParallelSpec ContextParallelSpec::from_config(const core::Config& cfg,
                                                     const ModelShape* model,
                                                     const Accelerator& plan_accelerator,
                                                     double train_mfu) {
  ContextParallelSpec s;
  CpLayer& l = s.layer;
  int heads = 0, kv_heads = 0, head_dim = 0, layers = 0;
  cfg.get("seq_len", l.seq_len);
  cfg.get("heads", heads);
  cfg.get("kv_heads", kv_heads);
  cfg.get("head_dim", head_dim);
  cfg.get("layers", layers);
  if (cfg.has("sparsity")) {
    try {
      cfg.get("sparsity", l.sparsity);
    } catch (const InputError&) {
      double one = 0;
      cfg.get("sparsity", one);
      l.sparsity = {one};
    }
  } else {
    cfg.get("sparsity", l.sparsity);
  }
  std::string split = cp_split_name(s.split), acc;
  cfg.get("split", split);
  s.split = parse_cp_split(split);
  cfg.get("accelerator", acc);
  const Accelerator& a = acc.empty() ? plan_accelerator : find_accelerator(acc);
  s.accelerator = a.name;
  s.device = CpDevice::from_accelerator(a);
  CpDevice& d = s.device;
  double intra_gb_s = 0, inter_gb_s = 0, latency_us = kDefaultLatencyUs, memory_gb = 0,
         matmul_efficiency = 0;
  cfg.get("node_size", d.node_size);
  cfg.get("intra_gb_s", intra_gb_s);
  cfg.get("inter_gb_s", inter_gb_s);
  cfg.get("latency_us", latency_us);
  cfg.get("attention_efficiency", d.attention_efficiency);
  cfg.get("sparse_efficiency", d.sparse_efficiency);
  cfg.get("matmul_efficiency", matmul_efficiency);
  cfg.get("activation_bytes_per_token", l.activation_bytes_per_token);
  cfg.get("matmul_flops_per_token", l.matmul_flops_per_token);
  cfg.get("memory_gb", memory_gb);
  cfg.get("target_s", s.target_step_s);
  cfg.get("candidates", s.candidates);

  auto from_model = [&](int value, const char* key, auto model_value) {
    if (value != 0) return value;
    if (!model) {
      throw InputError(std::string("context_parallel.") + key + " is required without a model");
    }
    return static_cast<int>(model_value());
  };
  l.heads = from_model(heads, "heads", [&] { return model->heads; });
  l.kv_heads = from_model(kv_heads, "kv_heads", [&] { return model->kv_heads; });
  l.head_dim = from_model(head_dim, "head_dim", [&] { return model->hidden / model->heads; });
  l.layers = from_model(layers, "layers", [&] { return model->layers; });
  if (model) {
    l.bytes_per_element = model->bytes_per_param;
    if (l.matmul_flops_per_token == 0) {
      // Forward + backward: the backward pass of a matmul is two matmuls of its size.
      l.matmul_flops_per_token = 3 * model->forward_flops_per_token(0);
    }
  }
  s.model = model ? model->name : "attention";
  if (intra_gb_s < 0 || inter_gb_s < 0 || memory_gb < 0 || latency_us < 0 ||
      matmul_efficiency < 0) {
    throw InputError(
        "context_parallel: intra_gb_s, inter_gb_s, latency_us, memory_gb and matmul_efficiency "
        "must be >= 0");
  }
  if (intra_gb_s > 0) d.intra.bytes_per_s = intra_gb_s * 1e9;
  if (inter_gb_s > 0) d.inter.bytes_per_s = inter_gb_s * 1e9;
  d.intra.op_latency_s = d.inter.op_latency_s = latency_us * 1e-6;
  if (memory_gb > 0) d.memory_bytes = memory_gb * 1e9;
  d.matmul_efficiency = matmul_efficiency > 0 ? matmul_efficiency : train_mfu;
  validate_cp(l, d);
  for (int c : s.candidates) {
    if (c < 1) {
      throw InputError("context_parallel.candidates must be >= 1 (got " + std::to_string(c) + ")");
    }
  }
  if (s.candidates.empty()) throw InputError("context_parallel.candidates is empty");
  if (!(s.target_step_s >= 0)) throw InputError("context_parallel.target_s must be >= 0");
  return s;
}

json plan_context_parallel(const ContextParallelSpec& s) {
  const CpSizing sparse =
      size_context_parallel(s.layer, s.device, s.candidates, s.target_step_s, s.split);
  CpLayer dense_layer = s.layer;
  dense_layer.sparsity.clear();
  const CpSizing dense =
      size_context_parallel(dense_layer, s.device, s.candidates, s.target_step_s, s.split);
  const std::vector<double> sp = resolved_sparsity(s.layer);
  const double mean_sparsity = std::accumulate(sp.begin(), sp.end(), 0.0) / sp.size();
  json j = {{"model", s.model},
            {"accelerator", s.accelerator},
            {"seq_len", s.layer.seq_len},
            {"heads", s.layer.heads},
            {"kv_heads", s.layer.kv_heads},
            {"head_dim", s.layer.head_dim},
            {"layers", s.layer.layers},
            {"mean_sparsity", mean_sparsity},
            {"split", cp_split_name(s.split)},
            {"node_size", s.device.node_size},
            {"intra_gb_s", s.device.intra.bytes_per_s / 1e9},
            {"inter_gb_s", s.device.inter.bytes_per_s / 1e9},
            {"memory_gb", gb(s.device.memory_bytes)},
            {"target_s", s.target_step_s},
            {"sizing", to_json(sparse)}};
  json dj = {{"cp", dense.cp}, {"reason", dense.reason}};
  if (dense.chosen >= 0) dj["step_s"] = dense.choices[dense.chosen].chosen()->step_s;
  // The sparse model's gain at its own degree: both sizings evaluated the same candidates.
  if (sparse.chosen >= 0) {
    const double t_sparse = sparse.choices[sparse.chosen].chosen()->step_s;
    const double t_dense = dense.choices[sparse.chosen].chosen()->step_s;
    dj["step_s_at_sparse_cp"] = t_dense;
    j["speedup_over_dense"] = t_dense / t_sparse;
  }
  j["dense"] = dj;
  return j;
}

std::string format_context_parallel(const json& p) {
  std::string s;
  char line[512];
  auto add = [&](const char* f, auto... args) {
    std::snprintf(line, sizeof line, f, args...);
    s += line;
  };
  add("context parallelism for %s at %lld tokens on %s: %d heads (%d KV) x %d, %d layers, mean "
      "sparsity %.2f, %s split, %.0f GB per rank",
      p["model"].get<std::string>().c_str(), static_cast<long long>(p["seq_len"].get<int64_t>()),
      p["accelerator"].get<std::string>().c_str(), p["heads"].get<int>(), p["kv_heads"].get<int>(),
      p["head_dim"].get<int>(), p["layers"].get<int>(), p["mean_sparsity"].get<double>(),
      p["split"].get<std::string>().c_str(), p["memory_gb"].get<double>());
  if (p["target_s"].get<double>() > 0) add(", step <= %.3g s", p["target_s"].get<double>());
  s += "\n";
  add("  %4s %-16s %9s %9s %8s %8s %8s %8s %9s %9s\n", "C", "best", "step_s", "attn_s", "hcp_s",
      "scp_s", "mem_GB", "lpt/naive", "pureHCP_s", "pureSCP_s");
  for (const auto& c : p["sizing"]["candidates"]) {
    const auto& o = c["chosen"];
    std::string best =
        std::to_string(o["c_h"].get<int>()) + "x" + std::to_string(o["c_s"].get<int>());
    if (o["c_h"].get<int>() > 1 && o["c_s"].get<int>() > 1) {
      best += " " + o["placement"].get<std::string>();
    }
    const auto& opts = c["options"];
    const auto& hcp = opts.front();
    const auto& scp = opts.back();
    char h[32];
    if (hcp["feasible"].get<bool>()) {
      std::snprintf(h, sizeof h, "%9.4g", hcp["step_s"].get<double>());
    } else {
      std::snprintf(h, sizeof h, "%9s", "-");
    }
    add("  %4d %-16s %9.4g %9.4g %8.3g %8.3g %8.1f %4.2f/%-4.2f %s %9.4g%s\n", c["cp"].get<int>(),
        best.c_str(), o["step_s"].get<double>(), o["attention_s"].get<double>(),
        o["hcp_comm_s"].get<double>(), o["scp_comm_s"].get<double>(), o["memory_gb"].get<double>(),
        o["max_load"].get<double>(), o["naive_max_load"].get<double>(), h,
        scp["step_s"].get<double>(), o["fits_memory"].get<bool>() ? "" : "  over memory");
  }
  add("  sized: %s\n", p["sizing"]["reason"].get<std::string>().c_str());
  const auto& d = p["dense"];
  if (d["cp"].get<int>() > 0) {
    add("  all heads dense: C = %d (step %.4g s)", d["cp"].get<int>(), d["step_s"].get<double>());
  } else {
    add("  all heads dense: %s", d["reason"].get<std::string>().c_str());
  }
  if (p.contains("speedup_over_dense")) {
    add("; at C = %d sparse attention is %.2fx faster per step", p["sizing"]["cp"].get<int>(),
        p["speedup_over_dense"].get<double>());
  }
  s += "\n";
  return s;
}

}  // namespace streamrl::planner
