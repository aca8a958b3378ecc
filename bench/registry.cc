#include "registry.h"

#include "model_speed.h"
#include "tokenizer_speed.h"

namespace streamrl::bench {

const std::vector<Benchmark>& all_benchmarks() {
  static const std::vector<Benchmark> kAll = {
      {"model_speed", "training fwd+bwd and decode tokens/s of the tiny model vs the GEMM roofline",
       run_model_speed},
      {"tokenizer", "tokenizer.json encode/decode MB/s on a trained 2k-merge byte-level BPE",
       run_tokenizer_speed},
  };
  return kAll;
}

}  // namespace streamrl::bench
