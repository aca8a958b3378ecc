// Tests of the TensorBoard event files: TFRecord framing read back with an independent bitwise
// CRC-32C, Event protobufs parsed back, scalars equal to the metrics.jsonl records, verl names.
#include "streamrl/telemetry/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "streamrl/telemetry/metrics_log.h"
#include "tensorboard_event.pb.h"

namespace streamrl::telemetry {
namespace {
namespace fs = std::filesystem;

// CRC-32C bit by bit (the writer uses a table), masked as TFRecord specifies.
uint32_t reference_masked_crc(const std::string& data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  c ^= 0xFFFFFFFFu;
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Every Event of an event file; fails the test on a bad length or checksum.
std::vector<tensorboard::Event> read_events(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  std::vector<tensorboard::Event> out;
  size_t at = 0;
  while (at < data.size()) {
    EXPECT_LE(at + 12, data.size());
    if (at + 12 > data.size()) break;
    const uint64_t n = le(data, at, 8);
    EXPECT_EQ(le(data, at + 8, 4), reference_masked_crc(data.substr(at, 8))) << "length crc";
    EXPECT_LE(at + 12 + n + 4, data.size());
    if (at + 12 + n + 4 > data.size()) break;
    const std::string payload = data.substr(at + 12, n);
    EXPECT_EQ(le(data, at + 12 + n, 4), reference_masked_crc(payload)) << "data crc";
    tensorboard::Event e;
    EXPECT_TRUE(e.ParseFromString(payload));
    out.push_back(e);
    at += 12 + n + 4;
  }
  return out;
}

class TensorBoardTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("streamrl_tb_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<fs::path> event_files() const {
    std::vector<fs::path> out;
    for (const auto& f : fs::directory_iterator(dir_)) {
      if (f.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(f);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
};

TEST(Crc32c, KnownVector) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(masked_crc32c("123456789"), reference_masked_crc("123456789"));
}

TEST_F(TensorBoardTest, MetricsRecordsReadBackAsScalarsWithVerlNames) {
  {
    MetricsLog log(dir_ / "metrics.jsonl", -1, /*tensorboard=*/true);
    log.write({{"step", 0}, {"eval", {{"accuracy", 0.25}}}});
    log.write({{"step", 1},
               {"reward_mean", 0.5},
               {"mode", "async"},
               {"response_length", {{"mean", 42.0}, {"p90", 97.5}}},
               {"stage_seconds", {{"generate", 3.0}, {"sample_work", 0.01}}},
               {"refused_samples", 2}});
    log.write({{"no_step", 1.0}});
  }
  ASSERT_EQ(event_files().size(), 1u);
  const std::vector<tensorboard::Event> events = read_events(event_files()[0]);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[1].step(), 0);
  ASSERT_EQ(events[1].summary().value_size(), 1);
  EXPECT_EQ(events[1].summary().value(0).tag(), "val-core/acc/mean@1");
  EXPECT_FLOAT_EQ(events[1].summary().value(0).simple_value(), 0.25f);
  EXPECT_EQ(events[2].step(), 1);
  std::map<std::string, float> got;
  for (const auto& v : events[2].summary().value()) got[v.tag()] = v.simple_value();
  const std::map<std::string, float> want = {
      {"critic/score/mean", 0.5f}, {"response_length/mean", 42.0f}, {"response_length/p90", 97.5f},
      {"timing_s/gen", 3.0f},      {"timing_s/sample_work", 0.01f}, {"refused_samples", 2.0f}};
  EXPECT_EQ(got, want);
  EXPECT_GT(events[2].wall_time(), 1.6e9);
}

TEST_F(TensorBoardTest, ResumedRunStartsANewFileThatPurgesLaterSteps) {
  { TensorBoardWriter(dir_).add_scalar("a", 1.0, 5); }
  sleep(1);  // event file names carry the start second
  { TensorBoardWriter(dir_, /*purge_after_step=*/3).add_scalar("a", 2.0, 4); }
  const std::vector<fs::path> files = event_files();
  ASSERT_EQ(files.size(), 2u);
  const std::vector<tensorboard::Event> resumed = read_events(files[1]);
  ASSERT_EQ(resumed.size(), 3u);
  EXPECT_EQ(resumed[1].session_log().status(), tensorboard::SessionLog::START);
  EXPECT_EQ(resumed[1].step(), 4);
  EXPECT_EQ(resumed[2].summary().value(0).tag(), "a");
  EXPECT_FLOAT_EQ(resumed[2].summary().value(0).simple_value(), 2.0f);
}

TEST(VerlMetricName, MapsMatchingQuantitiesAndKeepsOthers) {
  EXPECT_EQ(verl_metric_name("loss"), "actor/pg_loss");
  EXPECT_EQ(verl_metric_name("stage_seconds/train"), "timing_s/update_actor");
  EXPECT_EQ(verl_metric_name("final_eval/accuracy"), "val-core/acc/mean@1");
  EXPECT_EQ(verl_metric_name("idle_fraction/trainer"), "idle_fraction/trainer");
}

}  // namespace
}  // namespace streamrl::telemetry
