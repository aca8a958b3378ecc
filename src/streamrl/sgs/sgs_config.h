// The `sgs:` section of a run config: how many generation instances, how a
// batch is dispatched over them, and the length ranker that feeds skew-aware dispatch. RL modes
// read it with SgsConfig::read(root.section("sgs")).
//
//   sgs:
//     instances: 2
//     threads_per_instance: 1
//     dispatch: skew_aware        # random | least_loaded | skew_aware
//     latency_model: replay       # replay | eq2 (the paper's Eq. 2 with P90/P50)
//     alpha: auto                 # long-tail fraction (skew_aware): auto (replay only) | 0..1
//     objective: max              # eq2: max | sum (Algorithm 2 as printed)
//     admission: default          # default (LPT for skew_aware, else FIFO) | fifo | lpt
//     max_batch_size: 64          # the large batch per instance
//     length_window: 4096         # recent output lengths for P50/P90
//     profile: ""                 # `streamrl profile --out` JSON; "" = measure at start
//     ranker: {hidden_size: 64, layers: 2, heads: 4, steps: 300, batch_size: 64, lr: 3.0e-3,
//              window: 4096, refit_every: 5}
#pragma once

#include <string>

#include "streamrl/core/config.h"
#include "streamrl/sgs/dispatch.h"
#include "streamrl/sgs/length_ranker.h"

namespace streamrl::sgs {

struct SgsConfig {
  int instances = 2;
  int threads_per_instance = 1;
  DispatchConfig dispatch;
  size_t length_window = 4096;
  std::string profile;          // path of a PTL profile JSON, "" = measure one
  RankerConfig ranker;          // vocab_size is the policy tokenizer's, set by the caller
  size_t ranker_window = 4096;  // recent (prompt, length) pairs kept for online refits
  int refit_every = 5;          // iterations between online refits (K)
  // Instance k's device: devices[k % size] (cpu, cuda, cuda:N); empty: the trainer's run.device.
  std::vector<std::string> devices;
  std::string dtype = "auto";  // the policy's model.dtype, set by the caller

  // Reads the section over `defaults` (a caller's own defaults, e.g. one instance for RL on a
  // small machine); InputError names the key for a bad value.
  static SgsConfig read(const core::Config& section, SgsConfig defaults);
  static SgsConfig read(const core::Config& section) { return read(section, SgsConfig{}); }
};

}  // namespace streamrl::sgs
