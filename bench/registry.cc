#include "registry.h"

#include "allocator_bench.h"
#include "emulator_bench.h"
#include "engine_throughput.h"
#include "learning_bench.h"
#include "lina_bench.h"
#include "model_speed.h"
#include "moe_bench.h"
#include "pipeline_bench.h"
#include "rl_modes_bench.h"
#include "serve_bench.h"
#include "skew_bench.h"
#include "sparse_attention_bench.h"
#include "tokenizer_speed.h"
#include "workflow_bench.h"

namespace streamrl::bench {

std::filesystem::path source_path(const std::string& relative) {
  return std::filesystem::path(STREAMRL_SOURCE_DIR) / relative;
}

const std::vector<Benchmark>& all_benchmarks() {
  static const std::vector<Benchmark> kAll = {
      {"allocator",
       "colocate vs disagg training in fresh processes, glibc's malloc defaults vs streamrl's",
       run_allocator_bench, true},
      {"emulator",
       "step emulator vs the modes measured in the same rounds (or STREAMRL_RL_MODES_JSON=FILE)",
       run_emulator_bench, true},
      {"engine", "static vs continuous batching on a long-tailed workload, decode roofline",
       run_engine_throughput},
      {"learning",
       "GRPO with the sum verifier from its SFT checkpoint: held-out greedy accuracy, "
       "sampled pass@1 and pass@8 before/after, curve",
       run_learning, true},
      {"lina",
       "expert-parallel training over 2 ranks, fair-share vs Lina's scheduler, measured and "
       "emulated (also at the paper's scale); expert-popularity prediction (top-2k accuracy) and "
       "static vs Lina placement latency p50/p95",
       run_lina_bench},
      {"model_speed",
       "training fwd+bwd and decode tokens/s of the tiny model vs the GEMM roofline (--device)",
       run_model_speed, false, true},
      {"moe",
       "tiny MoE SFT: top-2 vs adaptive gating (T 0.1, 0.2) +- curriculum, time to the same "
       "held-out loss; async RL with and without routing replay",
       run_moe_bench, true},
      {"pipeline",
       "per-batch pipeline plans (PipeWeaver/DIP): static 1F1B vs dynamic, measured at PP 2 with "
       "real processes (and the emulator's error), emulated at PP 2/4/8, V 1/2; planner time "
       "and the share planning ahead hides",
       run_pipeline_bench},
      {"rl_modes", "colocate / disagg / stream / async on the same GRPO workload and cores",
       run_rl_modes, true},
      {"serve",
       "HTTP serve under load: requests/s, tokens/s, TTFT p50/p90 at 1/8/32 streams, /health p99",
       run_serve_bench},
      {"skew", "SGS dispatch: Random-FIFO vs skew-aware (ranker, oracle) on 2 instances, recall",
       run_skew_bench},
      {"sparse_attention",
       "dense vs block-sparse (DSV) causal attention fwd+bwd at 4k/8k/16k tokens and 90% sparsity, "
       "decode steps, whole training steps at 4k/8k; predictor loss and critical-mass coverage; "
       "retrieve-task quality after SFT dense vs with model.sparse_attention",
       run_sparse_attention_bench},
      {"tokenizer", "tokenizer.json encode/decode MB/s on a trained 2k-merge byte-level BPE",
       run_tokenizer_speed},
      {"workflow",
       "multi-turn calc-tool rollouts: module-level (fresh request per turn, lock-step turns) vs "
       "KV kept across turns vs each rollout continuing at once; latency p50/p90, throughput",
       run_workflow_bench},
  };
  return kAll;
}

}  // namespace streamrl::bench
