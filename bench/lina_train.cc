#include "lina_train.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench_ranks.h"
#include "rounds.h"
#include "streamrl/core/clock.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/stats.h"
#include "streamrl/core/threads.h"
#include "streamrl/dist/backward_comm.h"
#include "streamrl/dist/expert_parallel.h"
#include "streamrl/model/model_config.h"
#include "streamrl/model/moe.h"
#include "streamrl/model/transformer.h"
#include "streamrl/planner/link_sim.h"

namespace streamrl::bench {
namespace {

using json = nlohmann::json;
using core::Clock;
using torch::Tensor;

// Lina's gradient chunk. A chunk must be large against a launch's latency: the paper's 30 MB at
// 100 Gb/s moves for ~2.4 ms against ~20 us. Gloo over loopback here pays ~200 us a launch at
// ~2 GB/s, so 256 KiB is about the smallest chunk that is not mostly latency. Every gradient of
// the tiny MoE then goes in one piece (the largest is 64 KB): what Lina keeps here is the order,
// all-to-all first and all-reduce held during a combine. 16 KiB chunks measured Lina at 0.99x fair
// share with 2048 tokens per rank and 0.77x with 256.
constexpr int64_t kChunkBytes = 256 << 10;

struct StepTimes {
  double step_s = 0, forward_s = 0, backward_s = 0;
  dist::BackwardCommStats comm;
};

// What the link simulation needs of the tiny MoE: each layer's shared gradient bytes and FLOP
// weights for the attention side and the experts, and the LM head's.
struct ModelShape {
  std::vector<int64_t> layer_bytes;
  std::vector<double> attention_flops, expert_flops;
  double head_flops = 0;
  int64_t head_bytes = 0, embedding_bytes = 0;
};

ModelShape model_shape(model::CausalLM& lm, int64_t seq) {
  const model::ModelConfig& c = lm->config();
  ModelShape s;
  const int L = static_cast<int>(c.num_hidden_layers);
  s.layer_bytes.assign(L, 0);
  std::vector<int64_t> shared_params(L, 0);
  for (const auto& p : lm->named_parameters()) {
    const int64_t bytes = p.value().numel() * static_cast<int64_t>(p.value().element_size());
    if (model::is_expert_parameter(p.key())) continue;
    if (p.key().rfind("model.layers.", 0) == 0) {
      const int l = std::stoi(p.key().substr(13));
      s.layer_bytes[l] += bytes;
      shared_params[l] += p.value().numel();
    } else if (p.key().find("embed") != std::string::npos) {
      s.embedding_bytes += bytes;  // tied: its gradient is complete only at the very end
    } else {
      s.head_bytes += bytes;
    }
  }
  const double h = c.hidden_size, f = c.moe_intermediate_size, k = c.num_experts_per_tok;
  const double q_dim = static_cast<double>(c.num_attention_heads) * c.head_dim;
  for (int l = 0; l < L; ++l) {
    // Per token: the projections' multiply-adds and the causal scores and values (T/2 keys).
    s.attention_flops.push_back(2.0 * shared_params[l] + 2.0 * seq * q_dim);
    s.expert_flops.push_back(k * 2 * 3 * h * f);  // k SwiGLU experts of 3 h x f matrices
  }
  s.head_flops = 2 * h * c.vocab_size;
  return s;
}

// How much of the compute an all-reduce in flight takes (planner::Link::compute_share), on both
// ranks at once: a GEMM loop alone (T_c), an all-reduce loop alone (T_a, about a third of T_c),
// then both together; the simulation's model gives T_both = T_c + share * T_a.
double measure_compute_share(dist::ProcessGroup& world) {
  const Tensor a = torch::randn({2048, 128}), b = torch::randn({128, 384});
  const auto compute = [&] {
    for (int i = 0; i < 24; ++i) torch::mm(a, b);
  };
  const auto comm = [&] {
    for (int i = 0; i < 48; ++i) {
      std::vector<Tensor> v = {torch::ones({kChunkBytes / 4})};
      world.all_reduce_sum(v);
    }
  };
  const auto timed = [&](const std::function<void()>& f) {
    world.barrier();
    const auto start = Clock::now();
    f();
    return core::seconds_since(start);
  };
  std::vector<double> share;
  for (int i = 0; i < 3; ++i) {
    const double tc = timed(compute), ta = timed(comm);
    world.barrier();
    std::thread background(comm);
    const auto start = Clock::now();
    compute();
    const double both = core::seconds_since(start);
    background.join();
    share.push_back(std::clamp((both - tc) / ta, 0.0, 1.0));
  }
  return core::median(share);
}

// The link simulation fed with one round's profile (every part timed alone): the backward
// compute split over layers by FLOPs, the link's latency and bandwidth from all-reduces alone,
// each all-to-all's cost as measured alone.
struct Profile {
  double forward_s = 0, backward_compute_s = 0, a2a_op_s = 0, a2a_bytes_per_op = 0;
  double latency_s = 0, bytes_per_s = 0, compute_share = 0;
};

planner::LinkSimResult emulate(const ModelShape& m, const Profile& p, int ranks, int64_t hidden,
                               ep::Policy policy) {
  double total = m.head_flops;
  for (size_t l = 0; l < m.layer_bytes.size(); ++l)
    total += m.attention_flops[l] + m.expert_flops[l];
  const double per_flop = p.backward_compute_s / total;
  const double ring = 2.0 * (ranks - 1) / ranks;  // bytes through each rank's link per byte
  std::vector<planner::BackwardLayer> layers;
  planner::BackwardLayer head;
  head.compute_s = m.head_flops * per_flop;
  head.gradient_bytes = static_cast<int64_t>(m.head_bytes * ring);
  layers.push_back(head);
  const int64_t tokens =
      std::max<int64_t>(1, static_cast<int64_t>(p.a2a_bytes_per_op) / (hidden * 4));
  // Bytes per token that make one all-to-all alone take what it took.
  const double bpt = std::max(1.0, (p.a2a_op_s - p.latency_s) * p.bytes_per_s / tokens);
  for (int l = static_cast<int>(m.layer_bytes.size()) - 1; l >= 0; --l) {
    planner::BackwardLayer x;
    x.moe = true;
    x.compute_s = m.attention_flops[l] * per_flop;
    x.gradient_bytes =
        static_cast<int64_t>((m.layer_bytes[l] + (l == 0 ? m.embedding_bytes : 0)) * ring);
    x.tokens = tokens;
    x.bytes_per_token = static_cast<int64_t>(bpt);
    x.expert_s = m.expert_flops[l] * per_flop;
    layers.push_back(x);
  }
  // The runtime launches each all-to-all whole: one chunk in the simulation too.
  return planner::simulate_backward(layers, {p.bytes_per_s, p.latency_s, p.compute_share},
                                    {policy, kChunkBytes, int64_t{1} << 40});
}

}  // namespace

json run_lina_train_worker(const BenchOptions& options, const std::string& out_path) {
  core::apply_core_budget(1);  // one core per rank: ATen's pool and OpenBLAS's
  dist::ProcessGroup world(dist::process_group_options_from_env(std::chrono::seconds(120)));
  const int ranks = world.world_size(), rank = world.rank();
  dist::ExpertDataParallel edp(world, ranks);
  model::ModelConfig c =
      model::load_model_config(std::string(STREAMRL_SOURCE_DIR) + "/configs/model/tiny_moe.json");
  c.initializer_range = 0.3;  // routing that differs from token to token
  model::CausalLM lm(c, /*seed=*/7);
  model::shard_experts(*lm, edp.experts());
  auto comm = edp.backward_comm(lm->named_parameters(),
                                {ep::Policy::kPartitioned, kChunkBytes, int64_t{1} << 40},
                                std::chrono::seconds(120));
  const int64_t batch = 16, seq = 128;
  torch::manual_seed(1000 + rank);
  const Tensor tokens = torch::randint(3, c.vocab_size, {batch, seq}, torch::kLong);
  const Tensor valid = torch::ones({batch, seq}, torch::kBool);
  const double global = world.all_reduce_sum(std::vector<double>{double(batch * (seq - 1))})[0];
  const ModelShape shape = model_shape(lm, seq);
  int64_t shared_bytes = 0;
  for (const int64_t b : shape.layer_bytes) shared_bytes += b;
  shared_bytes += shape.head_bytes + shape.embedding_bytes;

  const auto step = [&](ep::Policy policy, bool defer, int chunks = 1) {
    edp.experts()->set_chunks(chunks);
    StepTimes t;
    world.barrier();  // ranks start together: a step's time is not a peer's lateness
    const auto start = Clock::now();
    const Tensor loss = -lm->score(tokens, valid).logprobs.sum() / global;
    t.forward_s = core::seconds_since(start);
    comm->begin(policy, defer);
    const auto back = Clock::now();
    loss.backward();
    t.backward_s = core::seconds_since(back);
    t.comm = comm->finish();
    t.step_s = core::seconds_since(start);
    for (auto& p : lm->parameters()) p.mutable_grad() = Tensor();  // no update: same work each step
    return t;
  };
  const auto all_reduce_s = [&](int64_t bytes) {  // median of 7, ranks started together
    std::vector<double> t;
    for (int i = 0; i < 7; ++i) {
      std::vector<Tensor> v = {torch::ones({std::max<int64_t>(1, bytes / 4)})};
      world.barrier();
      const auto start = Clock::now();
      world.all_reduce_sum(v);
      t.push_back(core::seconds_since(start));
    }
    return core::median(t);
  };

  const int rounds_n = options.quick ? 1 : 5, steps = options.quick ? 1 : 8;
  step(ep::Policy::kFairShare, false);  // warm-up: first-touch allocations, Gloo buffers
  Rounds rounds("lina training", ranks);
  // Variants: fair share, Lina's rule, nothing overlapped (the profile), and Lina's rule with its
  // pipelining: each dispatch and combine in kPipelineChunks token chunks, the experts computing
  // on one while the next travels.
  const char* names[] = {"fair_share", "lina", "alone", "lina_pipelined"};
  constexpr int kVariants = 4, kPipelineChunks = 2;
  for (int r = 0; r < rounds_n; ++r) {
    rounds.begin_round(r);
    std::vector<double> ms[kVariants], a2a[kVariants], fw[kVariants], fwd, bwd_compute, a2a_op,
        a2a_bytes, reduce;
    for (int s = 0; s < steps; ++s) {
      for (int i = 0; i < kVariants; ++i) {
        const int v = (i + r + s) % kVariants;  // each variant takes each position alike
        const StepTimes t =
            step(v == 1 || v == 3 ? ep::Policy::kPartitioned : ep::Policy::kFairShare, v == 2,
                 v == 3 ? kPipelineChunks : 1);
        ms[v].push_back(1e3 * t.step_s);
        a2a[v].push_back(1e3 * t.comm.all_to_all_s);
        fw[v].push_back(1e3 * t.forward_s);
        if (v == 2) {
          fwd.push_back(t.forward_s);
          bwd_compute.push_back(t.backward_s - t.comm.all_to_all_s);
          a2a_op.push_back(t.comm.all_to_all_s / std::max(1, t.comm.all_to_all_ops));
          a2a_bytes.push_back(double(t.comm.all_to_all_bytes) / std::max(1, t.comm.all_to_all_ops));
          reduce.push_back(1e3 * t.comm.finish_wait_s);
        }
      }
    }
    // Latency from a tiny all-reduce, bandwidth from the slope between the gradients' size and
    // 16 times it (~14 MB: a difference well above the timing noise; ring: 2 (n - 1) / n of the
    // bytes cross each rank's link).
    const double latency = all_reduce_s(8);
    const double slope = all_reduce_s(16 * shared_bytes) - all_reduce_s(shared_bytes);
    const double bytes_per_s =
        15.0 * shared_bytes * 2 * (ranks - 1) / ranks / std::max(1e-6, slope);
    // Fair share and Lina ran side by side in each step slot: the median of their pair ratios.
    std::vector<double> step_ratio, a2a_ratio, pipe_step, pipe_forward;
    for (int i = 0; i < steps; ++i) {
      step_ratio.push_back(ms[0][i] / ms[1][i]);
      a2a_ratio.push_back(a2a[0][i] / std::max(1e-9, a2a[1][i]));
      pipe_step.push_back(ms[1][i] / ms[3][i]);
      pipe_forward.push_back(fw[1][i] / fw[3][i]);
    }
    rounds.add("train_speedup", core::median(step_ratio));
    rounds.add("a2a_speedup", core::median(a2a_ratio));
    rounds.add("pipelining_speedup", core::median(pipe_step));
    rounds.add("pipelining_forward_speedup", core::median(pipe_forward));
    for (int v = 0; v < kVariants; ++v) {
      rounds.add(std::string(names[v]) + "_step_ms", core::median(ms[v]));
      rounds.add(std::string(names[v]) + "_a2a_ms", core::median(a2a[v]));
      rounds.add(std::string(names[v]) + "_forward_ms", core::median(fw[v]));
    }
    rounds.add("alone_reduce_ms", core::median(reduce));
    rounds.add("link_latency_us", 1e6 * latency);
    rounds.add("link_mb_s", bytes_per_s / 1e6);
    const double share = measure_compute_share(world);
    rounds.add("compute_share", share);
    Profile p;
    p.forward_s = core::median(fwd);
    p.backward_compute_s = core::median(bwd_compute);
    p.a2a_op_s = core::median(a2a_op);
    p.a2a_bytes_per_op = core::median(a2a_bytes);
    p.latency_s = latency;
    p.bytes_per_s = bytes_per_s;
    p.compute_share = share;
    for (const ep::Policy policy : {ep::Policy::kFairShare, ep::Policy::kPartitioned}) {
      const planner::LinkSimResult e = emulate(shape, p, ranks, c.hidden_size, policy);
      const std::string name = ep::policy_name(policy);
      rounds.add("emulated_" + name + "_step_ms", 1e3 * (p.forward_s + e.backward_s));
      rounds.add("emulated_" + name + "_a2a_ms", 1e3 * e.all_to_all_blocked_s);
    }
  }
  const auto err = [&](const std::string& key) {
    std::vector<double> e;
    const auto emu = rounds.values("emulated_" + key), got = rounds.values(key);
    for (size_t i = 0; i < std::min(emu.size(), got.size()); ++i) e.push_back(emu[i] / got[i] - 1);
    return spread_json(e);
  };
  json out = rounds.to_json();
  out["load"] = rounds.load_json();
  out["ranks"] = ranks;
  out["expert_parallel"] = ranks;
  out["batch_tokens_per_rank"] = batch * seq;
  out["all_reduce_chunk_bytes"] = kChunkBytes;
  out["shared_gradient_bytes"] = shared_bytes;
  out["steps_per_round"] = steps;
  out["train_speedup"] = rounds.summary("train_speedup");
  out["a2a_speedup"] = rounds.summary("a2a_speedup");
  // Lina's pipelining over Lina's rule alone (step and forward, where the dispatch overlaps the
  // experts; the backward's exchanges stay whole-chunk synchronous).
  out["pipeline_chunks"] = kPipelineChunks;
  out["pipelining_speedup"] = rounds.summary("pipelining_speedup");
  out["pipelining_forward_speedup"] = rounds.summary("pipelining_forward_speedup");
  out["emulated_train_speedup"] =
      rounds.ratio("emulated_fair_share_step_ms", "emulated_lina_step_ms");
  out["emulated_a2a_speedup"] = rounds.ratio("emulated_fair_share_a2a_ms", "emulated_lina_a2a_ms");
  out["emulator_relative_error"] = {{"fair_share_step", err("fair_share_step_ms")},
                                    {"lina_step", err("lina_step_ms")},
                                    {"fair_share_a2a", err("fair_share_a2a_ms")},
                                    {"lina_a2a", err("lina_a2a_ms")}};
  return finish_bench_rank(world, out, out_path, "lina");
}

json measure_lina_training(const BenchOptions& options) {
  return launch_bench_ranks("lina", 2, kLinaTrainWorkerEnv, options);  // one rank per core
}

}  // namespace streamrl::bench
