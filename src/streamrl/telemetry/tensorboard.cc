#include "streamrl/telemetry/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>

#include "streamrl/core/errors.h"
#include "tensorboard_event.pb.h"

namespace streamrl::telemetry {
namespace fs = std::filesystem;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// metrics.jsonl key path -> verl's metric name, where the quantity is the same.
const std::map<std::string, std::string>& verl_names() {
  static const std::map<std::string, std::string> names = {
      {"reward_mean", "critic/score/mean"},
      {"loss", "actor/pg_loss"},
      {"clip_fraction", "actor/pg_clipfrac"},
      {"ppo_kl", "actor/ppo_kl"},
      {"kl", "actor/kl_loss"},
      {"entropy", "actor/entropy"},
      {"grad_norm", "actor/grad_norm"},
      {"lr", "actor/lr"},
      {"stage_seconds/generate", "timing_s/gen"},
      {"stage_seconds/reference", "timing_s/ref"},
      {"stage_seconds/train", "timing_s/update_actor"},
      {"stage_seconds/weight_update", "timing_s/update_weights"},
      {"stage_seconds/iteration", "timing_s/step"},
      {"generated_tokens_per_s", "perf/throughput"},
      {"eval/accuracy", "val-core/acc/mean@1"},
      {"final_eval/accuracy", "val-core/acc/mean@1"},
      {"eval/mean_length", "val-aux/response_length/mean"},
      {"final_eval/mean_length", "val-aux/response_length/mean"},
  };
  return names;
}

void collect(const nlohmann::json& j, const std::string& path,
             std::vector<std::pair<std::string, double>>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) collect(v, path.empty() ? k : path + "/" + k, out);
  } else if (j.is_number()) {
    out.emplace_back(path, j.get<double>());
  } else if (j.is_boolean()) {
    out.emplace_back(path, j.get<bool>() ? 1.0 : 0.0);
  }
}

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

}  // namespace

uint32_t crc32c(const std::string& data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = crc_table()[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const std::string& data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string verl_metric_name(const std::string& key_path) {
  auto it = verl_names().find(key_path);
  if (it != verl_names().end()) return it->second;
  if (key_path.rfind("stage_seconds/", 0) == 0) return "timing_s/" + key_path.substr(14);
  if (key_path.rfind("eval/", 0) == 0) return "val-aux/" + key_path.substr(5);
  if (key_path.rfind("final_eval/", 0) == 0) return "val-aux/" + key_path.substr(11);
  return key_path;
}

TensorBoardWriter::TensorBoardWriter(const fs::path& dir, int64_t purge_after_step) {
  fs::create_directories(dir);
  const double start = now_seconds();
  path_ = dir / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(start)) + "." +
                 host_name());
  file_ = std::fopen(path_.c_str(), "ab");
  if (file_ == nullptr) {
    throw RuntimeFailure("cannot open " + path_.string() + ": " + std::strerror(errno));
  }
  tensorboard::Event version;
  version.set_wall_time(start);
  version.set_file_version("brain.Event:2");
  write_event(version.SerializeAsString());
  if (purge_after_step >= 0) {
    tensorboard::Event purge;
    purge.set_wall_time(start);
    purge.set_step(purge_after_step + 1);
    purge.mutable_session_log()->set_status(tensorboard::SessionLog::START);
    write_event(purge.SerializeAsString());
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::write_event(const std::string& bytes) {
  std::string header(8, '\0');
  const uint64_t length = bytes.size();
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  auto le32 = [](uint32_t v) {
    std::string s(4, '\0');
    for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
    return s;
  };
  const std::string record =
      header + le32(masked_crc32c(header)) + bytes + le32(masked_crc32c(bytes));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    throw RuntimeFailure("cannot write " + path_.string() + ": " + std::strerror(errno));
  }
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  tensorboard::Event e;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  tensorboard::SummaryValue* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  write_event(e.SerializeAsString());
}

void TensorBoardWriter::add_record(const nlohmann::json& record) {
  if (!record.contains("step") || !record["step"].is_number()) return;
  const int64_t step = record["step"].get<int64_t>();
  std::vector<std::pair<std::string, double>> scalars;
  collect(record, "", scalars);
  tensorboard::Event e;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  for (const auto& [path, value] : scalars) {
    if (path == "step") continue;
    tensorboard::SummaryValue* v = e.mutable_summary()->add_value();
    v->set_tag(verl_metric_name(path));
    v->set_simple_value(static_cast<float>(value));
  }
  if (e.summary().value_size() > 0) write_event(e.SerializeAsString());
}

}  // namespace streamrl::telemetry
