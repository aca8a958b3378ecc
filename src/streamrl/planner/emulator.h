// Step emulator (PipeWeaver's SEMU idea): a discrete-event simulation of RL
// iterations in the four controller modes from the stage cost models. Generation is
// simulated per instance with continuous batching (groups admitted together, FIFO or LPT order),
// so skewness bubbles come out of the length distribution; the trainer consumes samples as the
// mode allows (whole batch, dynamic batches on arrival, one-step-stale async).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "streamrl/core/rl_mode.h"
#include "streamrl/planner/cost_model.h"
#include "streamrl/planner/trace.h"
#include "streamrl/planner/workload.h"

namespace streamrl::planner {

// The controller modes are core's, shared with the RL loop.
using core::Mode;
using core::mode_name;
using core::parse_mode;

enum class Dispatch {
  kRandom,     // groups to random instances, FIFO admission (the Random-FIFO baseline)
  kSkewAware,  // Algorithm 2: top-alpha estimated-longest groups on N_l instances, the rest on
               // the others, LPT inside instances (N_l: see choose_long_instances)
};

Dispatch parse_dispatch(const std::string& name);  // "random" | "skew_aware"
std::string dispatch_name(Dispatch dispatch);

struct EmulatorInput {
  Mode mode = Mode::kColocate;
  Dispatch dispatch = Dispatch::kRandom;
  std::vector<InstanceModel> instances;  // in colocate mode: the devices the trainer also uses
  TrainerModel trainer;
  double weight_update_s = 0;       // trainer -> SGS weight push (ignored in colocate)
  std::vector<Batch> batches;       // one per iteration
  double long_tail_fraction = 0.2;  // alpha of Algorithm 2
  uint64_t seed = 0;                // random dispatch
  bool trace = false;
};

struct IterationTiming {
  double gen_start = 0, gen_end = 0;
  double train_start = 0, train_end = 0;  // first micro-batch start, optimizer step end
  double weights_ready = 0;               // new weights installed on the SGS
  double train_busy = 0;                  // trainer work of this iteration (no waits)
};

struct EmulatorResult {
  std::vector<IterationTiming> iterations;
  double makespan = 0;                  // end of the last optimizer step (or weight push)
  double iteration_seconds = 0;         // makespan / iterations
  double steady_iteration_seconds = 0;  // between the first and last optimizer steps
  double samples_per_s = 0;             // samples / makespan
  double gen_seconds = 0;               // mean generation phase per iteration
  double train_seconds = 0;             // mean trainer busy time per iteration
  double gen_idle_fraction = 0;         // of instance time over the makespan
  double train_idle_fraction = 0;
  TraceWriter trace;

  nlohmann::json to_json() const;  // figures only (the trace is written separately)
};

EmulatorResult emulate(const EmulatorInput& input);

struct GenerationResult {
  double end = 0;
  std::vector<double> finish;          // [samples] absolute finish time
  std::vector<double> busy;            // [instances] seconds with running sequences
  std::vector<int> instance_of_group;  // [groups]
};

// When a dynamic-sampling refill (Batch::released_after) goes to the generator: as soon as the
// group it replaced is in (modes that score samples on arrival), or once every group of that
// group's wave is (whole-batch modes score the batch after collecting it, then refill).
enum class RefillRelease { kOnGroup, kOnWave };

// Generates one batch from `start` on all instances. `trace` may be null; `iteration` labels spans.
GenerationResult simulate_generation(const std::vector<InstanceModel>& instances,
                                     const Batch& batch, Dispatch dispatch, double start,
                                     double long_tail_fraction, uint64_t seed,
                                     TraceWriter* trace = nullptr, int iteration = 0,
                                     RefillRelease release = RefillRelease::kOnGroup);

// N_l for skew-aware dispatch: the candidate split (Eq. 2's choice and a grid over 1..N-1) whose
// emulated generation of the batch *as estimated* (each sample as long as its group's estimate)
// ends first. Eq. 2 alone ignores the length spread inside each group, and at scale that often
// put 90% of the instances on the long group. Returns 0 when there is one instance.
int choose_long_instances(const std::vector<InstanceModel>& instances, const Batch& batch,
                          double long_tail_fraction);

// Algorithm 2's split as printed: instances for the long-tail group (the rest get the regular
// group), chosen with Eq. 2 (PTL(BS) x L x ceil(M / BS)) and group lengths P90/P50 of the
// estimates; objective max of the two groups' latencies. Returns 0 when there is one instance.
int skew_aware_long_instances(const InstanceModel& instance, int instances, const Batch& batch,
                              double long_tail_fraction);

}  // namespace streamrl::planner
