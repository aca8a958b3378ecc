#include "streamrl/rl/run_options.h"

#include "streamrl/core/errors.h"
#include "streamrl/tasks/dataset.h"

namespace streamrl::rl {

void RunOptions::read(const core::Config& c) {
  c.get("name", name);
  c.get("dir", runs_dir);
  c.get("seed", seed);
  c.get("threads", threads);
  c.get("resume", resume);
  if (name.empty() || name.find('/') != std::string::npos) {
    throw InputError("run.name must be a non-empty name without '/', got '" + name + "'");
  }
  if (threads < 0) throw InputError("run.threads must be >= 0 (0 = all cores)");
}

void DataOptions::read(const core::Config& c) {
  task = tasks::default_task_name();
  c.get("task", task);
  c.get("jsonl", jsonl);
  c.get("verifier", verifier);
  c.get("max_difficulty", max_difficulty);
  c.get("reward", reward);
  if (reward != "answer" && reward != "demonstration") {
    throw InputError("data.reward must be 'answer' or 'demonstration', got '" + reward + "'");
  }
}

const tasks::Task& DataOptions::load(std::unique_ptr<tasks::Task>* owned) const {
  if (jsonl.empty()) return tasks::get_task(task);
  *owned = std::make_unique<tasks::JsonlTask>(jsonl, verifier);
  return **owned;
}

void read_eval(const core::Config& c, int* every, EvalConfig* eval) {
  c.get("every", *every);
  c.get("n", eval->n);
  c.get("max_new_tokens", eval->max_new_tokens);
  c.get("batch_size", eval->batch_size);
  if (*every < 0 || eval->n < 0 || eval->max_new_tokens < 1 || eval->batch_size < 1) {
    throw InputError("eval: every >= 0, n >= 0, max_new_tokens >= 1 and batch_size >= 1 required");
  }
}

void CheckpointOptions::read(const core::Config& c) {
  c.get("every", every);
  c.get("keep", keep);
  if (every < 0) throw InputError("checkpoint.every must be >= 0");
}

}  // namespace streamrl::rl
