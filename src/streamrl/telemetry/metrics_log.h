// metrics.jsonl: one JSON object per line, appended and flushed per record so a killed run keeps
// everything it logged; optionally the same scalars as TensorBoard event files.
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "streamrl/telemetry/tensorboard.h"

namespace streamrl::telemetry {

class MetricsLog {
 public:
  // Opens `path` for appending (creating parent directories). If `truncate_after_step` >= 0,
  // records with "step" greater than it are dropped first: a resumed run rewrites the steps that
  // the killed run logged after its last checkpoint. With `tensorboard`, every record's numbers
  // also go to an event file beside `path` (tensorboard.h), purged from the same step on resume.
  explicit MetricsLog(const std::filesystem::path& path, int64_t truncate_after_step = -1,
                      bool tensorboard = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& record);

  // All records of a metrics.jsonl file (skipping a torn last line).
  static std::vector<nlohmann::json> read(const std::filesystem::path& path);

 private:
  std::FILE* file_ = nullptr;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace streamrl::telemetry
