// Config sections shared by the training commands (`sft`, `train`): the run directory, the data
// source and periodic checkpoints, read and validated in one place.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "streamrl/core/config.h"
#include "streamrl/model/transformer.h"
#include "streamrl/rl/evaluate.h"
#include "streamrl/rl/prompt_curriculum.h"
#include "streamrl/tasks/task.h"

namespace streamrl::rl {

// `run:` section.
struct RunOptions {
  std::string name;               // run directory is <dir>/<name>; no '/'
  std::string runs_dir = "runs";  // key `dir`
  uint64_t seed = 0;              // data order, init and sampling
  int threads = 0;                // core budget; 0 = all cores
  std::string device = "cpu";     // the trainer's and reference's device: cpu, cuda, cuda:N
  bool resume = true;             // continue from the newest checkpoint of the run directory

  void read(const core::Config& section);  // InputError for a bad name
  std::filesystem::path dir() const { return std::filesystem::path(runs_dir) / name; }
};

// Puts a model the trainer updates on run.device: fp32 master weights, and on CUDA autocast to
// `dtype` (model.dtype) for its forward and backward.
void place_trained_model(model::CausalLM& model, const RunOptions& run, const std::string& dtype);

// `data:` section: a built-in task (default: the default task) or a JSONL file with a verifier.
struct DataOptions {
  std::string task;
  std::string jsonl;
  std::string verifier = "numeric";
  // Training prompts only (evaluation always uses the whole task and its verifier):
  int max_difficulty = -1;        // >= 0: draw only problems up to this difficulty (curriculum)
  std::string reward = "answer";  // answer: the task's verifier; demonstration: 1 only when the
                                  // completion reproduces the reference scratchpad exactly
  CurriculumOptions curriculum;   // curriculum, curriculum_window, _floor, _power

  void read(const core::Config& section);
  // Loads the JSONL file now (so bad lines stop the run before training) into `*owned`, or looks
  // up the built-in task. The returned task lives as long as `*owned` (or forever). With reward
  // "demonstration", a record without one is an InputError naming the field and "PATH:LINE".
  const tasks::Task& load(std::unique_ptr<tasks::Task>* owned) const;
};

// `eval:` section: the held-out evaluation and how often it runs (0 = only at the end); keys
// every, n, max_new_tokens, batch_size, samples (0: greedy only; k: also sampled pass@1 and
// pass@k from k samples per problem) and sample_temperature (1.0).
void read_eval(const core::Config& section, int* every, EvalConfig* eval);

// `checkpoint:` section.
struct CheckpointOptions {
  int every = 10;  // iterations/steps between checkpoints; 0 = only the final one
  int keep = 2;    // older step_N directories are deleted

  void read(const core::Config& section);
};

}  // namespace streamrl::rl
