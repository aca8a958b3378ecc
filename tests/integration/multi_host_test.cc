// Several hosts on one machine: Linux network namespaces joined by a veth pair, each "host" with
// its own IP and its own run directory and checkpoint copy, so nothing may assume one host (a
// loopback bind, a shared path, a rank-0 file read by another rank). Host A runs trainer rank 0 and
// a `streamrl serve` instance, host B rank 1 and another instance; the run trains in stream mode
// with DP = 2 across them. Then the faults: a host killed mid-run (the other rank fails with one
// line, the restarted run resumes), a link that drops for a few seconds (the run waits and
// continues), a link down for longer than the timeout (both ranks fail clearly) and a slow link (a
// delaying TCP relay; this kernel has no netem). Needs root and iproute2, as CI has; skipped
// otherwise.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "run_binary.h"

namespace streamrl {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

// Two hosts: namespaces a and b, veth ends va (10.X.Y.1) and vb (10.X.Y.2). Names and the subnet
// carry this process's pid, so concurrent test runs do not collide.
class TwoHosts {
 public:
  TwoHosts() {
    const int id = static_cast<int>(getpid());
    tag_ = std::to_string(id % 100000);
    subnet_ = "10.231." + std::to_string(id % 250) + ".";
    if (geteuid() != 0) {
      why_ = "needs root for ip netns";
      return;
    }
    down_all();
    const std::string a = ns(0), b = ns(1), va = dev(0), vb = dev(1);
    ok_ = sh("ip netns add " + a) && sh("ip netns add " + b) &&
          sh("ip link add " + va + " type veth peer name " + vb) &&
          sh("ip link set " + va + " netns " + a) && sh("ip link set " + vb + " netns " + b) &&
          sh("ip -n " + a + " addr add " + ip(0) + "/24 dev " + va) &&
          sh("ip -n " + b + " addr add " + ip(1) + "/24 dev " + vb) &&
          sh("ip -n " + a + " link set lo up") && sh("ip -n " + b + " link set lo up") &&
          sh("ip -n " + a + " link set " + va + " up") &&
          sh("ip -n " + b + " link set " + vb + " up");
    if (!ok_) why_ = "ip netns / veth set-up failed (iproute2 missing or no CAP_NET_ADMIN)";
  }
  ~TwoHosts() { down_all(); }

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  std::string ns(int h) const { return "srl" + tag_ + (h == 0 ? "a" : "b"); }
  std::string ip(int h) const { return subnet_ + (h == 0 ? "1" : "2"); }
  // Takes the link down or up at host A's end.
  bool set_link(bool up) {
    return sh("ip -n " + ns(0) + " link set " + dev(0) + (up ? " up" : " down"));
  }

 private:
  std::string dev(int h) const { return "vsrl" + tag_ + (h == 0 ? "a" : "b"); }
  void down_all() {
    sh("ip netns del " + ns(0));
    sh("ip netns del " + ns(1));
  }
  std::string tag_, subnet_, why_;
  bool ok_ = false;
};

testing_util::ProcessOptions on_host(const TwoHosts& h, int host, int rank = -1, int world = 1) {
  testing_util::ProcessOptions o;
  o.netns = h.ns(host);
  if (rank >= 0) {
    o.env = {{"RANK", std::to_string(rank)},
             {"WORLD_SIZE", std::to_string(world)},
             {"MASTER_ADDR", h.ip(0)},
             {"MASTER_PORT", "29500"}};
  }
  return o;
}

std::vector<nlohmann::json> iteration_records(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("reward_mean")) out.push_back(std::move(j));
  }
  return out;
}

// Each host's files: its own copy of the initial checkpoint and its own run directory.
struct HostFiles {
  std::string root, init, runs;
};

class MultiHost : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!hosts_.ok()) GTEST_SKIP() << "multi-host test skipped: " << hosts_.why();
    dir_ = testing_util::fresh_temp_dir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    for (int h = 0; h < 2; ++h) {
      HostFiles f;
      f.root = dir_ + (h == 0 ? "/host_a" : "/host_b");
      f.init = f.root + "/init";
      f.runs = f.root + "/runs";
      fs::create_directories(f.root);
      files_.push_back(f);
    }
    auto init = testing_util::run_streamrl(
        {"init", "--model-config", std::string(STREAMRL_TEST_DATA_DIR) + "/tiny_model.json",
         "--out", files_[0].init});
    ASSERT_EQ(init.exit_code, 0) << init.output;
    fs::copy(files_[0].init, files_[1].init, fs::copy_options::recursive);
  }

  // One host's config: its own paths, the shared run shape.
  std::string write_config(int host, const std::vector<std::string>& urls, int iterations,
                           double sample_timeout_s) {
    const std::string path = files_[host].root + "/rl.yaml";
    std::ofstream out(path);
    out << "run: {dir: " << files_[host].runs << ", name: mh, threads: 1, seed: 5}\n"
        << "mode: stream\n"
        << "policy: {init_from: " << files_[host].init << "}\n"
        << "rollout: {prompts_per_iteration: 4, group_size: 4, max_new_tokens: 24, "
        << "sample_timeout_s: " << sample_timeout_s << "}\n"
        << "train: {iterations: " << iterations
        << ", optim: {lr: 0.001}}\n"
        // A random tiny policy never earns the task's reward; the soft overlong penalty gives
        // its samples different rewards, so there are gradients and optimizer state to keep.
        << "algo: {overlong: {buffer: 16}}\n"
        << "eval: {every: 0, n: 0}\ncheckpoint: {every: 2}\n"
        << "sgs: {urls: [";
    for (size_t i = 0; i < urls.size(); ++i) out << (i ? ", " : "") << urls[i];
    out << "], connect_timeout_s: 5, weight_timeout_s: 30}\n";
    return path;
  }

  // Trainer rank `rank` of two on host `rank`.
  std::unique_ptr<testing_util::BackgroundRun> start_rank(int rank, const std::string& config) {
    return std::make_unique<testing_util::BackgroundRun>(
        std::vector<std::string>{"train", "--config", config, "--json"},
        on_host(hosts_, rank, rank, 2));
  }

  fs::path metrics() const { return files_[0].runs + "/mh/metrics.jsonl"; }

  void wait_for_iterations(size_t n, testing_util::BackgroundRun& rank0) {
    const auto t0 = Clock::now();
    while (iteration_records(metrics()).size() < n && rank0.running() && since(t0) < 300) {
      std::this_thread::sleep_for(20ms);
    }
  }

  TwoHosts hosts_;
  std::string dir_;
  std::vector<HostFiles> files_;
};

// The largest iteration time over the median one: what a fault cost.
double stall_seconds(const std::vector<nlohmann::json>& records) {
  std::vector<double> s;
  for (const auto& r : records) s.push_back(r["stage_seconds"]["iteration"].get<double>());
  std::sort(s.begin(), s.end());
  return s.empty() ? 0 : s.back() - s[s.size() / 2];
}

TEST_F(MultiHost, StreamDataParallelAcrossHostsSurvivesAKilledHostAndResumes) {
  testing_util::ServeProcess serve_a(files_[0].init, on_host(hosts_, 0), hosts_.ip(0));
  auto serve_b = std::make_unique<testing_util::ServeProcess>(files_[1].init, on_host(hosts_, 1),
                                                              hosts_.ip(1));
  const std::string url_a = serve_a.wait_for_url(), url_b = serve_b->wait_for_url();
  ASSERT_EQ(url_a.find(hosts_.ip(0)), 7u) << url_a;  // http://<host A's address>:port
  ASSERT_EQ(url_b.find(hosts_.ip(1)), 7u) << url_b;
  const std::vector<std::string> urls = {url_a, url_b};
  const int iterations = 6;
  const std::string cfg_a = write_config(0, urls, iterations, 60),
                    cfg_b = write_config(1, urls, iterations, 60);

  // Host B dies (its trainer rank and its instance) after the checkpoint of iteration 2.
  auto rank0 = start_rank(0, cfg_a), rank1 = start_rank(1, cfg_b);
  wait_for_iterations(3, *rank0);
  ASSERT_TRUE(fs::exists(files_[0].runs + "/mh/checkpoints/step_2/trainer_state.json"));
  const auto killed_at = Clock::now();
  rank1->kill_now();
  serve_b->kill_now();
  const auto failed = rank0->wait(120);
  const double fail_s = since(killed_at);
  EXPECT_NE(failed.exit_code, 0) << failed.output;
  EXPECT_NE(failed.exit_code, -1) << "rank 0 hung after its peer died: " << failed.output;
  EXPECT_NE(testing_util::last_line(failed.output).find("rank 0 of 2"), std::string::npos)
      << failed.output;
  std::cout << "[multi-host] host B killed: rank 0 failed after " << fail_s
            << " s: " << testing_util::last_line(failed.output) << "\n";

  // Host B comes back; both ranks rerun the same command and resume from rank 0's checkpoint,
  // which only host A's disk holds.
  serve_b = std::make_unique<testing_util::ServeProcess>(files_[1].init, on_host(hosts_, 1),
                                                         hosts_.ip(1));
  const std::string url_b2 = serve_b->wait_for_url();
  ASSERT_FALSE(url_b2.empty());
  const std::string cfg_b2 = write_config(1, {url_a, url_b2}, iterations, 60);
  const std::string cfg_a2 = write_config(0, {url_a, url_b2}, iterations, 60);
  rank0 = start_rank(0, cfg_a2);
  rank1 = start_rank(1, cfg_b2);
  const auto r0 = rank0->wait(600);
  const auto r1 = rank1->wait(60);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  const auto result = nlohmann::json::parse(testing_util::last_line(r0.output));
  EXPECT_GE(result["resumed_from_iteration"].get<int>(), 2) << result.dump();
  EXPECT_TRUE(fs::exists(files_[0].runs + "/mh/final/config.json"));
  EXPECT_FALSE(fs::exists(files_[1].runs + "/mh/checkpoints")) << "rank 1 wrote checkpoints";

  // Every iteration after the resume trained all 16 samples of both ranks.
  const auto records = iteration_records(metrics());
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back()["step"], iterations);
  for (const auto& r : records) {
    EXPECT_GT(r["grad_norm"].get<double>(), 0.0) << "nothing trained: " << r.dump();
    EXPECT_EQ(r["trainer_ranks"], 2) << r.dump();
    EXPECT_EQ(r["samples"].get<int>() + r["refused_samples"].get<int>(), 16) << r.dump();
    EXPECT_EQ(r["refused_samples"], 0) << r.dump();
  }
  const auto& last = records.back();
  std::cout << "[multi-host] DP=2 across hosts: iteration " << last["stage_seconds"]["iteration"]
            << " s, weight push " << last["stage_seconds"]["weight_update"] << " s\n";
}

// SFT with DP = 2 across hosts, where only host A's disk holds the checkpoints: a run stopped at
// step 4 and continued to step 6 resumes on both ranks from rank 0's checkpoint (rank 1 has no run
// directory) and ends with the loss of a run that was never stopped.
TEST_F(MultiHost, SftAcrossHostsResumesBothRanksFromRankZerosCheckpoint) {
  const auto config = [&](int host, int steps) {
    const std::string path = files_[host].root + "/sft" + std::to_string(steps) + ".yaml";
    std::ofstream out(path);
    out << "run: {dir: " << files_[host].runs << ", seed: 5, threads: 1, resume: true}\n"
        << "model: {config: " << STREAMRL_TEST_DATA_DIR << "/tiny_model.json, tokenizer: char}\n"
        << "data: {task: sum}\n"
        << "train: {steps: "
        << steps
        // A constant rate after warm-up: the schedule does not depend on train.steps.
        << ", batch_size: 8, log_every: 1, optim: {lr: 0.003, warmup_steps: 2, min_lr_ratio: 1}}\n"
        << "eval: {n: 0}\ncheckpoint: {every: 2}\n";
    return path;
  };
  const auto run_both = [&](int steps, const std::string& name) {
    std::vector<std::unique_ptr<testing_util::BackgroundRun>> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.push_back(std::make_unique<testing_util::BackgroundRun>(
          std::vector<std::string>{"sft", "--config", config(r, steps), "run.name=" + name,
                                   "--json"},
          on_host(hosts_, r, r, 2)));
    }
    const auto r0 = ranks[0]->wait(300), r1 = ranks[1]->wait(60);
    EXPECT_EQ(r1.exit_code, 0) << r1.output;
    EXPECT_EQ(r0.exit_code, 0) << r0.output;
    return r0.exit_code == 0 ? nlohmann::json::parse(testing_util::last_line(r0.output))
                             : nlohmann::json();
  };
  const nlohmann::json full = run_both(6, "full");
  ASSERT_FALSE(full.is_null());
  ASSERT_FALSE(run_both(4, "split").is_null());
  EXPECT_FALSE(fs::exists(files_[1].runs + "/split/checkpoints")) << "rank 1 wrote checkpoints";
  const nlohmann::json resumed = run_both(6, "split");
  ASSERT_FALSE(resumed.is_null());
  EXPECT_EQ(resumed["resumed_from_step"], 4) << resumed.dump();
  EXPECT_NEAR(resumed["final_loss"].get<double>(), full["final_loss"].get<double>(), 1e-6);
}

TEST_F(MultiHost, ALinkDownForSecondsStallsTheRunWhichContinues) {
  testing_util::ServeProcess serve_a(files_[0].init, on_host(hosts_, 0), hosts_.ip(0));
  testing_util::ServeProcess serve_b(files_[1].init, on_host(hosts_, 1), hosts_.ip(1));
  const std::vector<std::string> urls = {serve_a.wait_for_url(), serve_b.wait_for_url()};
  // A tiny model's iteration takes ~30 ms: enough of them that the run outlasts the fault by far.
  const int iterations = 300;
  auto rank0 = start_rank(0, write_config(0, urls, iterations, 60));
  auto rank1 = start_rank(1, write_config(1, urls, iterations, 60));
  wait_for_iterations(2, *rank0);
  ASSERT_TRUE(hosts_.set_link(false));
  ASSERT_TRUE(rank0->running()) << "the run ended before the link went down; raise iterations";
  std::this_thread::sleep_for(4s);
  ASSERT_TRUE(hosts_.set_link(true));
  const auto r0 = rank0->wait(600), r1 = rank1->wait(60);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  const auto records = iteration_records(metrics());
  ASSERT_EQ(records.size(), static_cast<size_t>(iterations));
  for (const auto& r : records) EXPECT_EQ(r["samples"], 16) << r.dump();
  const double stall = stall_seconds(records);
  EXPECT_GT(stall, 3.0) << "the link went down after the run had finished";
  double waited = 0;  // the stalled iteration's time in collectives: the metrics say where it went
  for (const auto& r : records) {
    waited = std::max(waited, r["stage_seconds"]["collectives"].get<double>());
  }
  EXPECT_GT(waited, 3.0);
  std::cout << "[multi-host] link down 4 s: the run stalled " << stall << " s (" << waited
            << " s in collectives) and finished\n";
}

TEST_F(MultiHost, ALinkDownPastTheTimeoutFailsBothRanksClearly) {
  testing_util::ServeProcess serve_a(files_[0].init, on_host(hosts_, 0), hosts_.ip(0));
  testing_util::ServeProcess serve_b(files_[1].init, on_host(hosts_, 1), hosts_.ip(1));
  const std::vector<std::string> urls = {serve_a.wait_for_url(), serve_b.wait_for_url()};
  const double timeout_s = 8;
  auto rank0 = start_rank(0, write_config(0, urls, 20, timeout_s));
  auto rank1 = start_rank(1, write_config(1, urls, 20, timeout_s));
  wait_for_iterations(2, *rank0);
  ASSERT_TRUE(hosts_.set_link(false));
  const auto down_at = Clock::now();
  const auto r0 = rank0->wait(120), r1 = rank1->wait(30);
  const double fail_s = since(down_at);
  hosts_.set_link(true);
  for (const auto* r : {&r0, &r1}) {
    EXPECT_NE(r->exit_code, 0) << r->output;
    EXPECT_NE(r->exit_code, -1) << "a rank hung with the link down: " << r->output;
    EXPECT_NE(testing_util::last_line(r->output).find("process group"), std::string::npos)
        << r->output;
  }
  std::cout << "[multi-host] link down past the " << timeout_s
            << " s timeout: both ranks failed after " << fail_s
            << " s: " << testing_util::last_line(r0.output) << "\n";
}

// A TCP relay inside network namespace `ns`: listens on `ip` (any port) and forwards every
// connection to `to_ip:to_port`, each chunk in each direction held for `delay` first. A slow
// link without netem: latency per chunk, and at most one 64 KiB chunk per delay.
class DelayRelay {
 public:
  DelayRelay(const std::string& ns, const std::string& ip, const std::string& to_ip, int to_port,
             std::chrono::milliseconds delay) {
    std::atomic<int> port{-1};
    thread_ = std::thread([this, ns, ip, to_ip, to_port, delay, &port] {
      const int nsfd = open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
      if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0) {  // this thread only
        port = 0;
        return;
      }
      close(nsfd);
      const int lfd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
      socklen_t len = sizeof(a);
      if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(lfd, 16) != 0 ||
          getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        port = 0;
        return;
      }
      port = ntohs(a.sin_port);
      while (!stop_) {
        pollfd p{lfd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        const int in = accept(lfd, nullptr, nullptr);
        if (in < 0) continue;
        const int out = socket(AF_INET, SOCK_STREAM, 0);  // made here, so in this namespace
        sockaddr_in t{};
        t.sin_family = AF_INET;
        t.sin_port = htons(static_cast<uint16_t>(to_port));
        inet_pton(AF_INET, to_ip.c_str(), &t.sin_addr);
        if (connect(out, reinterpret_cast<sockaddr*>(&t), sizeof(t)) != 0) {
          close(in);
          close(out);
          continue;
        }
        pumps_.emplace_back([this, in, out, delay] { pump(in, out, delay); });
        pumps_.emplace_back([this, in, out, delay] { pump(out, in, delay); });
      }
      close(lfd);
    });
    while (port < 0) std::this_thread::sleep_for(5ms);
    port_ = port;
  }
  ~DelayRelay() {
    stop_ = true;
    thread_.join();
    for (auto& t : pumps_) t.join();
  }
  int port() const { return port_; }

 private:
  void pump(int from, int to, std::chrono::milliseconds delay) {
    char buf[65536];
    while (!stop_) {
      pollfd p{from, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = read(from, buf, sizeof(buf));
      if (n <= 0) break;
      std::this_thread::sleep_for(delay);
      for (ssize_t off = 0; off < n;) {
        const ssize_t w = write(to, buf + off, n - off);
        if (w <= 0) break;
        off += w;
      }
    }
    shutdown(to, SHUT_WR);  // the other direction's pump sees the close and closes its side
  }

  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> pumps_;
  int port_ = 0;
};

int port_of(const std::string& url) { return std::stoi(url.substr(url.rfind(':') + 1)); }

// One trainer on host A with its generation instance on host B ("generation elsewhere"), over the
// link as it is and through a relay that holds each chunk 20 ms: the run must finish either way;
// the weight push is timed against the iteration.
TEST_F(MultiHost, GenerationAcrossASlowLinkFinishesAndTimesTheWeightPush) {
  testing_util::ServeProcess serve_b(files_[1].init, on_host(hosts_, 1), hosts_.ip(1));
  const std::string url_b = serve_b.wait_for_url();
  ASSERT_FALSE(url_b.empty());
  DelayRelay relay(hosts_.ns(0), hosts_.ip(0), hosts_.ip(1), port_of(url_b), 20ms);
  ASSERT_GT(relay.port(), 0);
  const std::string relayed = "http://" + hosts_.ip(0) + ":" + std::to_string(relay.port());
  for (const auto& [name, url] :
       {std::pair<std::string, std::string>{"direct", url_b}, {"20 ms relay", relayed}}) {
    fs::remove_all(files_[0].runs);
    const std::string cfg = write_config(0, {url}, 4, 60);
    const auto run =
        testing_util::run_streamrl({"train", "--config", cfg}, 600, on_host(hosts_, 0));
    ASSERT_EQ(run.exit_code, 0) << name << ": " << run.output;
    const auto records = iteration_records(metrics());
    ASSERT_EQ(records.size(), 4u) << name;
    double push = 0, iter = 0;
    for (const auto& r : records) {
      EXPECT_EQ(r["samples"], 16) << name << ": " << r.dump();
      push += r["stage_seconds"]["weight_update"].get<double>();
      iter += r["stage_seconds"]["iteration"].get<double>();
    }
    std::cout << "[multi-host] generation across the link (" << name << "): weight push "
              << push / 4 << " s per iteration of " << iter / 4 << " s (" << 100 * push / iter
              << " %)\n";
  }
}

}  // namespace
}  // namespace streamrl
