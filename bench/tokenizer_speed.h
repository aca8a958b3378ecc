// `streamrl bench tokenizer_speed`: single-core encode/decode throughput of the tokenizer.json
// pipeline on a realistic byte-level BPE (trained in process) and a multi-megabyte English-like
// text.
#pragma once

#include <nlohmann/json.hpp>

#include "registry.h"

namespace streamrl::bench {

// Trains a ~2000-merge byte-level BPE on generated text, then encodes and decodes several
// megabytes with Llama-3-, Qwen2- and GPT-2-style pre-tokenization side by side. Reports
// encode_mb_per_s (Llama-3 style, fresh word cache) against goal_encode_mb_per_s = 5,
// decode_mb_per_s and roundtrip_ok. `quick` uses 1 MB instead of 8 MB; `threads` is ignored
// (the figure is per core).
nlohmann::json run_tokenizer_speed(const BenchOptions& options);

}  // namespace streamrl::bench
