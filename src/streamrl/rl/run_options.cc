#include "streamrl/rl/run_options.h"

#include "streamrl/core/device.h"
#include "streamrl/core/errors.h"
#include "streamrl/tasks/dataset.h"

namespace streamrl::rl {

void RunOptions::read(const core::Config& c) {
  c.get("name", name);
  c.get("dir", runs_dir);
  c.get("seed", seed);
  c.get("threads", threads);
  c.get("resume", resume);
  c.get("device", device);
  core::parse_device(device, "run.device");  // an unknown or absent device stops the run here
  if (name.empty() || name.find('/') != std::string::npos) {
    throw InputError("run.name must be a non-empty name without '/', got '" + name + "'");
  }
  if (threads < 0) throw InputError("run.threads must be >= 0 (0 = all cores)");
}

void place_trained_model(model::CausalLM& model, const RunOptions& run, const std::string& dtype) {
  const torch::Device device = core::parse_device(run.device, "run.device");
  model->place(device, torch::kFloat32);
  model->set_autocast(core::compute_dtype(dtype, device));
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
  std::string curriculum_mode = "none";
  c.get("curriculum", curriculum_mode);
  c.get("curriculum_window", curriculum.window);
  c.get("curriculum_floor", curriculum.floor);
  c.get("curriculum_power", curriculum.power);
  if (curriculum_mode != "none" && curriculum_mode != "pass_rate") {
    throw InputError("data.curriculum must be 'none' or 'pass_rate', got '" + curriculum_mode +
                     "'");
  }
  curriculum.enabled = curriculum_mode == "pass_rate";
  if (curriculum.window < 1 || !(curriculum.floor > 0 && curriculum.floor <= 1) ||
      !(curriculum.power > 0)) {
    throw InputError(
        "data.curriculum_window must be >= 1, data.curriculum_floor in (0, 1] and "
        "data.curriculum_power > 0");
  }
}

const tasks::Task& DataOptions::load(std::unique_ptr<tasks::Task>* owned) const {
  if (jsonl.empty()) return tasks::get_task(task);
  auto dataset = std::make_unique<tasks::JsonlTask>(jsonl, verifier);
  // A reward that reads a field the records lack would compare every completion with "": the
  // empty completion then earns the top reward and the policy learns to stop at once.
  if (reward == "demonstration") {
    for (size_t i = 0; i < dataset->size(); ++i) {
      if (dataset->problem(i).demonstration.empty()) {
        throw InputError(
            "data.reward 'demonstration' needs a \"demonstration\" field in every "
            "record, but " +
            dataset->problem(i).source +
            " has none (or give data.reward 'answer' to score with verifier '" + verifier + "')");
      }
    }
  }
  *owned = std::move(dataset);
  return **owned;
}

void read_eval(const core::Config& c, int* every, EvalConfig* eval) {
  c.get("every", *every);
  c.get("n", eval->n);
  c.get("max_new_tokens", eval->max_new_tokens);
  c.get("batch_size", eval->batch_size);
  c.get("samples", eval->samples);
  c.get("sample_temperature", eval->sample_temperature);
  if (*every < 0 || eval->n < 0 || eval->max_new_tokens < 1 || eval->batch_size < 1) {
    throw InputError("eval: every >= 0, n >= 0, max_new_tokens >= 1 and batch_size >= 1 required");
  }
  if (eval->samples < 0 || !(eval->sample_temperature > 0)) {
    throw InputError("eval: samples >= 0 and sample_temperature > 0 required");
  }
}

void CheckpointOptions::read(const core::Config& c) {
  c.get("every", every);
  c.get("keep", keep);
  if (every < 0) throw InputError("checkpoint.every must be >= 0");
}

}  // namespace streamrl::rl
