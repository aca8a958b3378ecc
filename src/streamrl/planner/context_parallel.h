// Sparsity-aware context parallelism for long-context training (DSV, arXiv 2502.07590, §7): one
// sequence of S tokens is spread over C ranks as C = C_h x C_s, head-wise (HCP, Ulysses: an
// all-to-all re-shards tokens to heads, heads placed by LPT on their cost 1 - sparsity) inside
// sequence-wise groups (SCP: each rank keeps S / C_s queries and gathers only the remote
// *critical* keys of its heads). The planner prices every factorisation, keeps the cheapest that
// fits the memory budget (DSV's exhaustive solver) and sizes C for `streamrl plan`.
//
// Cost model (per attention layer, forward + backward of one sequence; a step is `layers` of them
// plus the matmuls outside attention, which CP splits evenly):
//  * compute: the busiest rank's causal query-key pairs x 4·D FLOPs, backward 2.5x forward
//    (FlashAttention's count), at `attention_efficiency` of peak. A head of sparsity s costs
//    min(1, (1 - s) / sparse_efficiency) of a dense head: a sparse kernel is slower per useful
//    FLOP, and a head it would not speed up runs dense.
//  * causal imbalance: `kZigzag` (default) splits the sequence in 2·C_s chunks and gives SCP rank
//    j chunks j and 2·C_s - 1 - j, so every rank has S² / (2·C_s) pairs; `kContiguous` gives rank
//    j the j-th slice, and the last rank's (C_s - 1/2)·(S / C_s)² pairs set the pace.
//  * HCP: four all-to-alls per layer (Q,K,V in, O out; dO in, dQ,dK,dV out) among the C_h ranks of
//    one SCP shard. A rank's port carries max(in, out) bytes, so an uneven head count shows.
//  * SCP: the busiest rank gathers the critical fraction (1 - s) of (C_s - 1)·S / C_s remote
//    tokens' K and V per KV head it holds (s of a KV head: the least sparse of the rank's query
//    heads that share it), keeps them for the backward pass and returns dK, dV: 4 such volumes.
//    A rank with sparse heads also sends int32 key indices and pays DSV's two extra rounds
//    (lengths, index requests); dense heads are a plain gather.
//  * links: ranks of one group on one node use `intra`, the rest `inter`; the busiest port's
//    on- and off-node shares move in parallel. Placement `kHcpInner` puts HCP groups on
//    consecutive ranks (inside a node when C_h <= node_size), `kScpInner` the SCP groups; the
//    cheaper one is kept, as in DSV's solver.
//  * memory per rank: `layers` x (S / C tokens' activations + the remote critical K, V kept for
//    the backward pass). Weights and optimizer state are outside the budget.
//
// Simplifications: communication does not overlap compute (DSV's objective sums them; ring
// attention would hide part of SCP's); one sequence per step, no data parallelism; the remote
// critical set of a rank's queries is taken as (1 - s) of the remote keys, which assumes the
// neighbouring queries share their critical keys (DSV Obs. 5); no activation recomputation.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "streamrl/planner/hardware.h"
#include "streamrl/planner/link_sim.h"
#include "streamrl/planner/model_shape.h"

namespace streamrl::core {
class Config;
}

namespace streamrl::planner {

// One long-context attention layer stack.
struct CpLayer {
  int64_t seq_len = 131072;  // S, tokens of the one sequence
  int heads = 32;            // H, query heads
  int kv_heads = 8;          // K/V heads; H / kv_heads query heads share one (GQA)
  int head_dim = 128;        // D
  int layers = 1;            // attention layers per step
  // Per query head in [0, 1): the fraction of a query's visible keys outside its critical set.
  // Empty: all dense; one value: every head.
  std::vector<double> sparsity;
  double bytes_per_element = 2;           // BF16 activations
  double activation_bytes_per_token = 0;  // per layer, kept for backward (0: 34·H·D)
  double matmul_flops_per_token = 0;      // forward + backward outside attention (0: none)
};

struct CpDevice {
  double peak_flops = 989.5e12;       // dense BF16
  double attention_efficiency = 0.5;  // dense attention kernel, of peak
  double sparse_efficiency = 0.5;     // sparse kernel speed per useful FLOP, of dense
  double matmul_efficiency = 0.4;     // the matmuls outside attention, of peak
  Link intra{400e9, 10e-6, 0};        // ranks on one node
  Link inter{25e9, 10e-6, 0};         // ranks on different nodes, per device
  int node_size = 8;
  double memory_bytes = 40e9;  // per rank, for activations and gathered K/V

  // Peak, NVLink and network bandwidth from the catalogue; memory: half the HBM (the other half
  // for weights, gradients and optimizer state).
  static CpDevice from_accelerator(const Accelerator& accelerator);
};

enum class CpSplit { kZigzag, kContiguous };
enum class CpPlacement { kHcpInner, kScpInner };
const char* cp_split_name(CpSplit split);
CpSplit parse_cp_split(const std::string& name);  // InputError for an unknown name
const char* cp_placement_name(CpPlacement placement);

// Longest-processing-time-first: items by weight, heaviest first (ties: lower index), each to the
// least loaded bin (ties: lower bin). Within 4/3 - 1/(3·bins) of the best max load (Graham).
struct LptResult {
  std::vector<std::vector<int>> bins;  // item indices per bin, in assignment order
  std::vector<double> loads;
  double max_load = 0;
};
LptResult lpt_assign(const std::vector<double>& weights, int bins);

// Each query head's compute relative to a dense head (see the cost model above).
std::vector<double> head_costs(const CpLayer& layer, const CpDevice& device);

// One factorisation C = c_h x c_s under one placement; times are per step (all layers).
struct CpOption {
  int c_h = 1, c_s = 1;
  CpPlacement placement = CpPlacement::kHcpInner;
  bool feasible = true;
  std::string infeasible_reason;
  bool head_units_are_kv_groups = true;  // LPT over KV groups (else over query heads, KV copied)
  std::vector<std::vector<int>> heads_per_rank;  // query heads of each HCP rank
  double max_load = 0, mean_load = 0;            // HCP ranks' compute, in dense heads
  double naive_max_load = 0;                     // heads in index order, contiguous blocks
  double compute_s = 0;                          // attention compute of the busiest rank
  double hcp_comm_s = 0, scp_comm_s = 0;
  double matmul_s = 0;         // outside attention
  double step_s = 0;           // compute + hcp + scp + matmul
  double hcp_bytes = 0;        // busiest port per layer, forward + backward
  double scp_kv_bytes = 0;     // busiest rank's remote K/V (and dK/dV) per layer
  double scp_index_bytes = 0;  // its key indices per layer
  double memory_bytes = 0;     // per rank
  bool fits_memory = true;
};

// Prices one factorisation. InputError for bad input (see validate_cp below).
CpOption cost_cp_option(const CpLayer& layer, const CpDevice& device, int c_h, int c_s,
                        CpPlacement placement, CpSplit split = CpSplit::kZigzag);

// Every factorisation of `cp` (c_h descending) under both placements where they differ; `best`
// is the fastest that is feasible and fits memory, else the fastest feasible (fits_memory false),
// else -1.
struct CpChoice {
  int cp = 1;
  std::vector<CpOption> options;
  int best = -1;
  std::string reason;  // one line: what won and against what
  const CpOption* chosen() const { return best < 0 ? nullptr : &options[best]; }
};
CpChoice choose_context_parallel(const CpLayer& layer, const CpDevice& device, int cp,
                                 CpSplit split = CpSplit::kZigzag);

// The smallest candidate C whose choice fits the memory budget and, when target_step_s > 0, runs a
// step within it. cp = 0 and a reason when none does.
struct CpSizing {
  std::vector<CpChoice> choices;  // one per candidate, ascending
  int cp = 0;
  int chosen = -1;  // index into choices
  std::string reason;
};
CpSizing size_context_parallel(const CpLayer& layer, const CpDevice& device,
                               std::vector<int> candidates, double target_step_s = 0,
                               CpSplit split = CpSplit::kZigzag);

// Throws InputError (one line) for S < 1, heads or kv_heads < 1, heads not a multiple of kv_heads,
// head_dim or layers < 1, a sparsity list of another length than 1 or H, a sparsity outside
// [0, 1), or a device with non-positive speeds, efficiencies above 1 or node_size < 1.
void validate_cp(const CpLayer& layer, const CpDevice& device);

nlohmann::json to_json(const CpOption& option);
nlohmann::json to_json(const CpChoice& choice);
nlohmann::json to_json(const CpSizing& sizing);

// The `context_parallel` section of a plan (configs/plan/*.yaml).
struct ContextParallelSpec {
  std::string model;        // label
  std::string accelerator;  // label
  CpLayer layer;
  CpDevice device;
  CpSplit split = CpSplit::kZigzag;
  std::vector<int> candidates = {1, 2, 4, 8, 16, 32, 64};
  double target_step_s = 0;

  // Shape keys left at 0 come from `model` (InputError when there is none); the accelerator from
  // `accelerator` (the plan's when null); `matmul_efficiency` defaults to `train_mfu`.
  static ContextParallelSpec from_config(const core::Config& section, const ModelShape* model,
                                         const Accelerator& plan_accelerator, double train_mfu);
};

// Sizing at the measured sparsity next to the same model all dense.
nlohmann::json plan_context_parallel(const ContextParallelSpec& spec);
std::string format_context_parallel(const nlohmann::json& plan);

}  // namespace streamrl::planner
