#include "streamrl/rl/train_checkpoint.h"
#include "streamrl/dist/process_group.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <sstream>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/core/log.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/safetensors.h"

namespace streamrl::rl {
namespace fs = std::filesystem;

namespace {

std::vector<CheckpointRef> list_checkpoints(const fs::path& run_dir) {
  std::vector<CheckpointRef> out;
  fs::path root = run_dir / "checkpoints";
  if (!fs::is_directory(root)) return out;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !name.starts_with("step_")) continue;
    if (name.find(".tmp.") != std::string::npos || name.find(".old.") != std::string::npos)
      continue;
    if (!fs::exists(e.path() / "trainer_state.json")) continue;
    try {
      out.push_back({std::stoll(name.substr(5)), e.path()});
    } catch (const std::exception&) {
    }
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.step < b.step; });
  return out;
}

// The PID of a "step_N.tmp.PID" or "step_N.old.PID" name; -1 for any other name.
pid_t temp_dir_owner(const std::string& name) {
  for (const char* mark : {".tmp.", ".old."}) {
    const size_t at = name.find(mark);
    if (at == std::string::npos) continue;
    try {
      size_t used = 0;
      const std::string digits = name.substr(at + 5);
      const long pid = std::stol(digits, &used);
      if (used == digits.size() && pid > 0) return static_cast<pid_t>(pid);
    } catch (const std::exception&) {
    }
  }
  return -1;
}

// Removes the temp directories of save_checkpoint/replace_directory whose writer is gone (a live
// process may still be writing its own).
void remove_stray_temp_dirs(const fs::path& run_dir) {
  const fs::path root = run_dir / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    const pid_t pid = temp_dir_owner(name);
    if (!name.starts_with("step_") || pid < 0) continue;
    if (pid != ::getpid() && (::kill(pid, 0) == 0 || errno == EPERM)) continue;
    SLOG(kWarn) << "removing " << e.path().string() << ", left by an interrupted checkpoint write";
    fs::remove_all(e.path(), ec);
  }
}

}  // namespace

std::optional<CheckpointRef> latest_checkpoint(const fs::path& run_dir) {
  auto all = list_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back();
}

fs::path save_training_checkpoint(const fs::path& run_dir, int64_t step, model::CausalLM& model,
                                  const std::string& tokenizer_json,
                                  torch::optim::Optimizer& optimizer, const nlohmann::json& state,
                                  int keep, model::SparseAttentionTrainer* sparse) {
  std::map<std::string, std::string> files = {{"optimizer.pt", optimizer_bytes(optimizer)}};
  if (sparse) files[kSparseOptimizerFile] = optimizer_bytes(sparse->optimizer());
  return save_training_checkpoint(run_dir, step, model, tokenizer_json, files, state, keep);
}

void resume_sparse_optimizer(const std::string& bytes, model::SparseAttentionTrainer* sparse) {
  if (bytes.empty() || !sparse) return;
  try {
    load_optimizer_bytes(sparse->optimizer(), bytes);
  } catch (const InputError& e) {
    throw InputError(std::string(kSparseOptimizerFile) + ": " + e.what());
  }
}

fs::path save_training_checkpoint(const fs::path& run_dir, int64_t step, model::CausalLM& model,
                                  const std::string& tokenizer_json,
                                  const std::map<std::string, std::string>& optimizer_files,
                                  const nlohmann::json& state, int keep) {
  fs::path dir = run_dir / "checkpoints" / ("step_" + std::to_string(step));
  std::map<std::string, std::string> files = optimizer_files;
  files["trainer_state.json"] = state.dump(2) + "\n";
  model::save_checkpoint(dir, model, tokenizer_json, files);
  if (keep > 0) {
    auto all = list_checkpoints(run_dir);
    for (size_t i = 0; i + keep < all.size(); ++i) fs::remove_all(all[i].dir);
  }
  remove_stray_temp_dirs(run_dir);
  return dir;
}

namespace {

nlohmann::json read_trainer_state(const fs::path& dir) {
  nlohmann::json state =
      nlohmann::json::parse(core::read_file(dir / "trainer_state.json"), nullptr, false);
  if (state.is_discarded() || !state.is_object()) {
    throw InputError((dir / "trainer_state.json").string() + ": not a JSON object");
  }
  if (!state.contains("step") || !state["step"].is_number_integer()) {
    throw InputError((dir / "trainer_state.json").string() + ": no integer 'step'");
  }
  return state;
}

// The newest checkpoint whose weights, state and optimizer (`read_optimizer(dir, &resumed)`,
// InputError when it does not read) all read back; its weights are loaded into `model` last.
template <class ReadOptimizer>
std::optional<ResumedCheckpoint> resume_newest(const fs::path& run_dir, model::CausalLM& model,
                                               ReadOptimizer&& read_optimizer) {
  remove_stray_temp_dirs(run_dir);
  auto all = list_checkpoints(run_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      // Everything is read and checked before the model changes (load_weights checks first).
      auto weights = model::read_safetensors_dir(it->dir);
      model::check_weights(model, weights, it->dir.string());
      ResumedCheckpoint resumed{*it, read_trainer_state(it->dir), {}, {}};
      read_optimizer(it->dir, &resumed);
      model::load_sparse_attention(model, it->dir);  // checked whole before it changes the model
      model::load_weights(model, weights, it->dir.string());
      return resumed;
    } catch (const InputError& e) {
      SLOG(kWarn) << "skipping unreadable checkpoint " << it->dir.string() << ": " << e.what();
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ResumedCheckpoint> resume_training_checkpoint(const fs::path& run_dir,
                                                            model::CausalLM& model,
                                                            torch::optim::Optimizer& optimizer) {
  return resume_newest(run_dir, model, [&](const fs::path& dir, ResumedCheckpoint* resumed) {
    try {
      load_optimizer_bytes(optimizer, core::read_file(dir / "optimizer.pt"));
    } catch (const InputError& e) {
      throw InputError((dir / "optimizer.pt").string() + ": " + e.what());
    }
    if (fs::exists(dir / kSparseOptimizerFile)) {
      resumed->sparse_optimizer = core::read_file(dir / kSparseOptimizerFile);
    }
  });
}

std::optional<ResumedCheckpoint> resume_training_checkpoint(
    const fs::path& run_dir, model::CausalLM& model,
    const std::vector<std::string>& optimizer_files) {
  return resume_newest(run_dir, model, [&](const fs::path& dir, ResumedCheckpoint* resumed) {
    for (const std::string& name : optimizer_files) {
      if (!fs::exists(dir / name)) throw InputError((dir / name).string() + ": missing");
      resumed->optimizer_states.push_back(core::read_file(dir / name));
    }
  });
}

std::string optimizer_bytes(torch::optim::Optimizer& optimizer) {
  std::ostringstream out;
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  archive.save_to(out);
  return out.str();
}

void load_optimizer_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes) {
  try {
    std::istringstream in(bytes);
    // The moments live where the parameters do (a run may resume on another device).
    std::optional<torch::Device> device;
    for (auto& g : optimizer.param_groups()) {
      if (!g.params().empty()) device = g.params().front().device();
    }
    torch::serialize::InputArchive archive;
    if (device) {
      archive.load_from(in, *device);
    } else {
      archive.load_from(in);
    }
    optimizer.load(archive);
  } catch (const c10::Error& e) {
    throw InputError("cannot load optimizer state (" +
                     std::string(e.what_without_backtrace()).substr(0, 200) + ")");
  }
}

std::vector<std::string> ep_optimizer_files(int ep) {
  std::vector<std::string> names;
  for (int e = 0; e < ep; ++e) names.push_back("optimizer_ep" + std::to_string(e) + ".pt");
  return names;
}

std::string receive_expert_optimizer_state(dist::ProcessGroup& group,
                                           const std::vector<std::string>& states, int ep,
                                           int ep_rank) {
  const bool lead = group.rank() == 0;
  // The count goes to every rank first, so a short list fails all of them with the same line
  // (a throw on the lead alone would leave the others waiting in the broadcast).
  const std::string count =
      group.broadcast_bytes_from_rank0(lead ? std::to_string(states.size()) : "");
  if (count != std::to_string(ep)) {
    throw InputError("an expert-parallel checkpoint needs " + std::to_string(ep) +
                     " optimizer states, got " + count);
  }
  // Each rank receives its own expert rank's state only (a broadcast of all of them would move
  // ep times the bytes to every rank): rank 0 learns who holds which expert rank, then sends.
  const std::vector<std::string> holders = group.all_gather_bytes(std::to_string(ep_rank));
  constexpr int kSizeTag = 9001, kBytesTag = 9002;
  const auto u8 = torch::TensorOptions().dtype(torch::kUInt8);
  if (!lead) {
    const int64_t size =
        group.recv({1}, torch::TensorOptions().dtype(torch::kLong), 0, kSizeTag).item<int64_t>();
    if (size == 0) return {};
    const torch::Tensor bytes = group.recv({size}, u8, 0, kBytesTag);
    return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                       static_cast<size_t>(size));
  }
  for (int r = 1; r < group.world_size(); ++r) {
    const std::string& state =
        states[static_cast<size_t>(std::stoi(holders[static_cast<size_t>(r)]))];
    group.send(torch::tensor({static_cast<int64_t>(state.size())}, torch::kLong), r, kSizeTag);
    if (state.empty()) continue;
    // A view of the string, not a copy: `states` outlives the wait_sends() below.
    group.send(
        torch::from_blob(const_cast<char*>(state.data()), {static_cast<int64_t>(state.size())}, u8),
        r, kBytesTag);
  }
  group.wait_sends();
  return states[static_cast<size_t>(ep_rank)];
}

void check_checkpoint_parallelism(const fs::path& run_dir, int ep) {
  const auto last = latest_checkpoint(run_dir);
  if (!last) return;
  const nlohmann::json state =
      nlohmann::json::parse(core::read_file(last->dir / "trainer_state.json"), nullptr, false);
  const int was = state.is_object() ? state.value("parallel_ep", 1) : ep;
  if (was != ep) {
    throw InputError(last->dir.string() + " was written with parallel.ep = " + std::to_string(was) +
                     "; resume it with the same parallel.ep (this run has " + std::to_string(ep) +
                     ") or choose another run.name");
  }
}

}  // namespace streamrl::rl
