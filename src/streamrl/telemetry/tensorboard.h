// TensorBoard event files: the scalars of metrics.jsonl as curves that `tensorboard --logdir runs/`
// shows, named as verl names them. Records are TFRecord-framed (length, masked CRC32C of the
// length, Event protobuf, masked CRC32C of the data) and each is flushed, so a killed run keeps
// what it wrote.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace streamrl::telemetry {

class TensorBoardWriter {
 public:
  // Creates dir/events.out.tfevents.SECONDS.HOST. When `purge_after_step` >= 0 (a resumed run), the
  // file starts with SessionLog START at purge_after_step + 1: TensorBoard then drops the points of
  // earlier files from that step on, as the run rewrites them. Throws RuntimeFailure when the file
  // cannot be created.
  explicit TensorBoardWriter(const std::filesystem::path& dir, int64_t purge_after_step = -1);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step);
  // Every number of a metrics.jsonl record (nested objects joined with '/', booleans as 0/1) as
  // scalars at record["step"], named by verl_metric_name. A record without "step" is skipped.
  void add_record(const nlohmann::json& record);

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_event(const std::string& bytes);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// The verl metric name of a metrics.jsonl key path ("reward_mean" -> "critic/score/mean",
// "stage_seconds/generate" -> "timing_s/gen", "eval/accuracy" -> "val-core/acc/mean@1"); keys
// without a verl counterpart keep their own path.
std::string verl_metric_name(const std::string& key_path);

// CRC-32C (Castagnoli) of `data`, and TFRecord's masked form of it.
uint32_t crc32c(const std::string& data);
uint32_t masked_crc32c(const std::string& data);

}  // namespace streamrl::telemetry
