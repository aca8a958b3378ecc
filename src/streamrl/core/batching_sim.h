// Continuous batching of one generation instance, simulated on its decode step time: the engine
// of the SGS dispatcher's replay latency model and of the planner's step emulator. Between two
// completions the batch is constant, so decoding advances to the next completion in one chunk
// at the mean context halfway through it. Which sequences are admitted when, and what their
// prefill costs, stays with the caller (the emulator admits whole groups, the replay samples).
#pragma once

#include <functional>
#include <utility>
#include <vector>

namespace streamrl::core {

// Seconds of one decode step: one token for each of `batch` sequences whose mean cached context
// is `context` tokens (a PtlTable's step_seconds, or a roofline model).
using StepFn = std::function<double(double batch, double context)>;

class BatchingSim {
 public:
  struct Chunk {
    double seconds = 0;
    double steps = 0;           // decode steps: the fewest tokens any running sequence had left
    int batch = 0;              // sequences decoding throughout the chunk
    std::vector<int> finished;  // ids of the sequences done at its end, in admission order
  };

  // `step` must outlive this. `shared_context` is cached by every sequence on top of its own
  // context (a prompt length common to all of them): it is added to the mean, not to each one.
  explicit BatchingSim(const StepFn& step, double shared_context = 0)
      : step_(step), shared_context_(shared_context) {}
  BatchingSim(StepFn&& step, double shared_context = 0) = delete;  // would dangle

  // Starts sequence `id` with `tokens` (> 0) to generate and `context` tokens already cached.
  void admit(int id, double tokens, double context);
  int running() const { return static_cast<int>(ids_.size()); }

  // Decodes every running sequence up to the next completion(s): steps x step(batch, mean
  // context + steps / 2). Needs a running sequence. The chunk is valid until the next call (its
  // storage is reused: searches replay thousands of chunks).
  const Chunk& decode_to_next_completion() { return decode(kAll); }
  // Decodes at most `max_steps` (>= 1) steps, fewer when a sequence completes sooner: the chunk
  // up to a point where something else happens (another group admitted mid-way).
  const Chunk& decode(double max_steps);
  // The chunk decode(max_steps) would run, without running it: {steps, seconds}.
  std::pair<double, double> next_chunk(double max_steps = kAll) const;

  static constexpr double kAll = 1e300;

 private:
  const StepFn& step_;
  double shared_context_;
  // The running sequences in admission order, one array per field so the per-chunk scans over
  // them stay tight.
  std::vector<int> ids_;
  std::vector<double> remaining_;
  std::vector<double> context_;
  Chunk chunk_;
};

}  // namespace streamrl::core
