// The four RL controller modes and what each one means. The RL loop and the step
// emulator read a mode once and ask its traits, so a new mode is one enum value and one row of
// traits(), not a string compared in several places.
#pragma once

#include <string>

namespace streamrl::core {

class Config;

enum class Mode {
  kColocate,  // generate the whole batch, then train, on the same cores/devices and module
  kDisagg,    // separate resources; training waits for the full batch
  kStream,    // separate resources; per-sample work and micro-batches as samples arrive
  kAsync,     // as stream, and generation of iteration k overlaps training of k - 1
};

struct ModeTraits {
  // Generation runs on its own resources (an SGS pool) and receives weights after each step;
  // otherwise it shares the trainer's module and runs only between steps.
  bool dedicated_generator = false;
  // Per-sample work (reward, reference log-probs) runs as each sample arrives and complete groups
  // are trained in eager micro-batches; otherwise both wait for the whole batch.
  bool on_arrival = false;
  // Iterations whose prompts go out before the current one's optimizer step: with 1 (async),
  // generation of iteration k + 1 overlaps training of k, on weights one step stale.
  int iterations_ahead = 0;
};

Mode parse_mode(const std::string& name);  // InputError naming the known modes
std::string mode_name(Mode mode);
// The mode named by `key` of `section` (InputError for an unknown name); `fallback` when absent.
Mode read_mode(const Config& section, const std::string& key, Mode fallback);
ModeTraits traits(Mode mode);

}  // namespace streamrl::core
