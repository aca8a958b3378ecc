#include "streamrl/telemetry/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::telemetry {
namespace fs = std::filesystem;

std::vector<nlohmann::json> MetricsLog::read(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

MetricsLog::MetricsLog(const fs::path& path, int64_t truncate_after_step, bool tensorboard) {
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  if (truncate_after_step >= 0 && fs::exists(path)) {
    std::string kept;
    for (const auto& r : read(path)) {
      if (r.contains("step") && r["step"].get<int64_t>() > truncate_after_step) continue;
      kept += r.dump() + "\n";
    }
    core::write_file_atomic(path, kept);
  }
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    throw RuntimeFailure("cannot open " + path.string() + ": " + std::strerror(errno));
  }
  if (tensorboard) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(
        path.has_parent_path() ? path.parent_path() : fs::path("."), truncate_after_step);
  }
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
  if (tensorboard_) tensorboard_->add_record(record);
}

}  // namespace streamrl::telemetry
