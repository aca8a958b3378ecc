#include "streamrl/rl/train_checkpoint.h"

#include <algorithm>
#include <sstream>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/model/checkpoint.h"

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

}  // namespace

std::optional<CheckpointRef> latest_checkpoint(const fs::path& run_dir) {
  auto all = list_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back();
}

fs::path save_training_checkpoint(const fs::path& run_dir, int64_t step, model::CausalLM& model,
                                  const std::string& tokenizer_json,
                                  torch::optim::Optimizer& optimizer, const nlohmann::json& state,
                                  int keep) {
  std::ostringstream opt_bytes;
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  archive.save_to(opt_bytes);
  fs::path dir = run_dir / "checkpoints" / ("step_" + std::to_string(step));
  model::save_checkpoint(
      dir, model, tokenizer_json,
      {{"optimizer.pt", opt_bytes.str()}, {"trainer_state.json", state.dump(2) + "\n"}});
  if (keep > 0) {
    auto all = list_checkpoints(run_dir);
    for (size_t i = 0; i + keep < all.size(); ++i) fs::remove_all(all[i].dir);
  }
  return dir;
}

nlohmann::json load_training_state(const fs::path& dir, torch::optim::Optimizer& optimizer) {
  std::string state_text = core::read_file(dir / "trainer_state.json");
  nlohmann::json state = nlohmann::json::parse(state_text, nullptr, false);
  if (state.is_discarded() || !state.is_object()) {
    throw InputError((dir / "trainer_state.json").string() + ": not a JSON object");
  }
  std::string bytes = core::read_file(dir / "optimizer.pt");
  try {
    std::istringstream in(bytes);
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    optimizer.load(archive);
  } catch (const c10::Error& e) {
    throw InputError((dir / "optimizer.pt").string() + ": cannot load optimizer state (" +
                     std::string(e.what_without_backtrace()).substr(0, 200) + ")");
  }
  return state;
}

}  // namespace streamrl::rl
