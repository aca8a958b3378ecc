// Resumable training checkpoints under <run>/checkpoints/step_N/: the model checkpoint (HF layout)
// plus optimizer.pt (AdamW moments and step counts) and trainer_state.json (step, data position,
// anything else the trainer needs to continue exactly where it stopped).
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "streamrl/model/sparse_training.h"
#include "streamrl/model/transformer.h"

namespace streamrl::dist {
class ProcessGroup;  // dist/process_group.h
}  // namespace streamrl::dist

namespace streamrl::rl {

struct CheckpointRef {
  int64_t step = 0;
  std::filesystem::path dir;
};

// The newest complete step_N directory of `run_dir` (one with trainer_state.json), if any.
std::optional<CheckpointRef> latest_checkpoint(const std::filesystem::path& run_dir);

struct ResumedCheckpoint {
  CheckpointRef ref;
  nlohmann::json state;  // its trainer_state.json
  // The overload with optimizer files: their bytes, in the order asked for.
  std::vector<std::string> optimizer_states;
  // The other: DSV's predictor optimizer (kSparseOptimizerFile), "" when the checkpoint has none.
  std::string sparse_optimizer;
};

// Where a training checkpoint keeps the Adam state of DSV's predictors (model.sparse_attention),
// beside optimizer.pt, so a resumed run continues their training rather than restarting it.
inline constexpr char kSparseOptimizerFile[] = "sparse_attention_optimizer.pt";

// Loads a resumed checkpoint's sparse_optimizer into `sparse` (nothing when either is absent).
void resume_sparse_optimizer(const std::string& bytes, model::SparseAttentionTrainer* sparse);

// Resumes from the newest checkpoint of `run_dir` that reads back whole: its weights go into
// `model` and its optimizer state into `optimizer`. A newer one that does not (truncated, corrupt)
// is skipped with a warning naming it and the error. Removes the step_N.tmp.PID / step_N.old.PID
// directories that a writer killed mid-save left behind. nullopt when no checkpoint reads.
std::optional<ResumedCheckpoint> resume_training_checkpoint(const std::filesystem::path& run_dir,
                                                            model::CausalLM& model,
                                                            torch::optim::Optimizer& optimizer);

// As above for a run whose ranks each hold part of the optimizer state (expert parallelism): the
// checkpoint's files `optimizer_files` are read back, not loaded, into optimizer_states.
std::optional<ResumedCheckpoint> resume_training_checkpoint(
    const std::filesystem::path& run_dir, model::CausalLM& model,
    const std::vector<std::string>& optimizer_files);

// Writes <run_dir>/checkpoints/step_<step>/ atomically, then deletes all but the newest `keep`
// step directories (keep <= 0 keeps all) and any temp directory a killed writer left behind.
// Returns the directory written.
std::filesystem::path save_training_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                               model::CausalLM& model,
                                               const std::string& tokenizer_json,
                                               torch::optim::Optimizer& optimizer,
                                               const nlohmann::json& state, int keep,
                                               model::SparseAttentionTrainer* sparse = nullptr);
// As above with the optimizer state as files (name -> bytes), e.g. one per expert rank.
std::filesystem::path save_training_checkpoint(
    const std::filesystem::path& run_dir, int64_t step, model::CausalLM& model,
    const std::string& tokenizer_json, const std::map<std::string, std::string>& optimizer_files,
    const nlohmann::json& state, int keep);

// The optimizer state files of an expert-parallel checkpoint (one per expert rank), by rank.
std::vector<std::string> ep_optimizer_files(int ep);

// Expert parallelism's resume: rank 0 passes `states` (the checkpoint's optimizer state of each
// expert rank, ep_optimizer_files' order), the other ranks nothing; every rank of `group` calls it
// and gets back the state of its expert rank `ep_rank`.
std::string receive_expert_optimizer_state(dist::ProcessGroup& group,
                                           const std::vector<std::string>& states, int ep,
                                           int ep_rank);

// A checkpoint holds the optimizer state as its run split it (trainer_state.json's
// "parallel_ep"): InputError when the newest checkpoint of `run_dir` was written with another
// parallel.ep than `ep`. Nothing when the run has no checkpoint.
void check_checkpoint_parallelism(const std::filesystem::path& run_dir, int ep);

// The optimizer's state as optimizer.pt holds it, and back (InputError when it does not load).
std::string optimizer_bytes(torch::optim::Optimizer& optimizer);
void load_optimizer_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes);

}  // namespace streamrl::rl
