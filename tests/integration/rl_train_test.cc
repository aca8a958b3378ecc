// `streamrl train` end to end at tiny scale: metrics per iteration, and a run killed with SIGKILL
// resumes from its last checkpoint with identical metrics afterwards.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>

#include "run_binary.h"

namespace streamrl {
namespace {
using testing_util::last_line;
using testing_util::run_streamrl;
namespace fs = std::filesystem;

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

class RlTrain : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing_util::fresh_temp_dir("rl_train");
    auto r = run_streamrl({"sft", "--config", testing_util::write_tiny_sft_config(dir_)});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream g(dir_ + "/rl.yaml");
    g << "run: {dir: " << dir_ << "/runs, threads: 1, seed: 3}\n"
      << "policy: {init_from: " << dir_ << "/runs/sft/final}\n"
      << "rollout: {prompts_per_iteration: 3, group_size: 4, max_new_tokens: 24}\n"
      << "train: {iterations: 6, optim: {lr: 0.001}}\n"
      << "algo: {kl: {coef: 0.01}}\n"
      << "eval: {every: 0, n: 6, max_new_tokens: 24}\n"
      << "checkpoint: {every: 2, keep: 2}\n";
  }
  // `train` run `name` with a large update of two iterations (lr 1, eps 1) whose parameters several
  // ranks must reproduce: `head` launches it, `extra` adds keys.
  static std::vector<std::string> exact_update(std::vector<std::string> head,
                                               const std::string& name,
                                               const std::vector<std::string>& extra) {
    for (const std::string& a :
         {std::string("train"), std::string("--config"), dir_ + "/rl.yaml",
          std::string("train.iterations=2"), std::string("train.micro_batch_tokens=64"),
          std::string("train.optim.lr=1"), std::string("train.optim.eps=1"),
          std::string("algo.entropy_coef=0.01"), std::string("eval.n=0"), std::string("--json")}) {
      head.push_back(a);
    }
    head.insert(head.end(), extra.begin(), extra.end());
    head.push_back("run.name=" + name);
    return head;
  }
  static std::string dir_;
};
std::string RlTrain::dir_;

TEST_F(RlTrain, LogsEveryIterationAndReportsAccuracy) {
  auto r = run_streamrl(
      {"train", "--config", dir_ + "/rl.yaml", "run.name=full", "eval.samples=4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(last_line(r.output));
  EXPECT_TRUE(j.contains("accuracy_before"));
  EXPECT_TRUE(j.contains("accuracy_after"));
  // Sampled pass@1 and pass@k before and after, overall and by difficulty, in the result, the
  // metrics and the report.
  for (const char* key : {"eval_before", "eval_after"}) {
    const auto& e = j[key];
    EXPECT_EQ(e["samples"].get<int>(), 4) << key;
    for (const char* k : {"1", "2", "4"}) EXPECT_TRUE(e["pass_at_k"].contains(k)) << key << k;
    EXPECT_LE(e["pass_at_k"]["1"].get<double>(), e["pass_at_k"]["4"].get<double>());
    EXPECT_NEAR(e["pass_at_k"]["1"].get<double>(), e["pass_at_1_sampled"].get<double>(), 1e-9);
    for (const auto& [d, s] : e["by_difficulty"].items()) {
      EXPECT_TRUE(s.contains("pass_at_k")) << d;
      EXPECT_GE(s["distinct_prompts"].get<int>(), 1) << d;
      EXPECT_LE(s["distinct_prompts"].get<int>(), s["n"].get<int>()) << d;
    }
  }
  EXPECT_TRUE(j["warnings"].is_array());
  std::ifstream report(dir_ + "/runs/full/report.html");
  const std::string html((std::istreambuf_iterator<char>(report)), {});
  EXPECT_NE(html.find("Held-out pass@k"), std::string::npos);
  auto m = read_metrics(dir_ + "/runs/full/metrics.jsonl");
  int iterations = 0;
  for (const auto& rec : m) {
    if (!rec.contains("reward_mean")) continue;
    ++iterations;
    for (const char* key : {"accuracy", "response_length", "kl", "entropy", "clip_fraction",
                            "grad_norm", "lr", "generated_tokens_per_s", "samples_per_s",
                            "stage_seconds", "idle_fraction", "weight_version"}) {
      EXPECT_TRUE(rec.contains(key)) << key;
    }
    EXPECT_EQ(rec["samples"].get<int>(), 12);
    // One update per rollout: the ratio never leaves the clip range.
    EXPECT_LT(rec["clip_fraction"].get<double>(), 1e-9);
  }
  EXPECT_EQ(iterations, 6);
}

TEST_F(RlTrain, SigkillThenResumeGivesIdenticalMetrics) {
  auto full = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "run.name=ref", "--json"});
  ASSERT_EQ(full.exit_code, 0) << full.output;
  pid_t pid =
      testing_util::spawn_streamrl({"train", "--config", dir_ + "/rl.yaml", "run.name=killed"});
  fs::path marker = fs::path(dir_) / "runs/killed/checkpoints/step_2/trainer_state.json";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(marker) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(fs::exists(marker));
  ASSERT_FALSE(fs::exists(fs::path(dir_) / "runs/killed/final")) << "run finished before the kill";
  auto resumed =
      run_streamrl({"train", "--config", dir_ + "/rl.yaml", "run.name=killed", "--json"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  auto a = read_metrics(dir_ + "/runs/ref/metrics.jsonl");
  auto b = read_metrics(dir_ + "/runs/killed/metrics.jsonl");
  auto iteration_records = [](const std::vector<nlohmann::json>& v) {
    std::vector<nlohmann::json> out;
    for (auto rec : v) {
      if (!rec.contains("reward_mean")) continue;
      rec.erase("stage_seconds");  // wall-clock figures differ between runs
      rec.erase("idle_fraction");
      rec.erase("generated_tokens_per_s");
      rec.erase("samples_per_s");
      out.push_back(rec);
    }
    return out;
  };
  auto ra = iteration_records(a), rb = iteration_records(b);
  ASSERT_EQ(ra.size(), 6u);
  ASSERT_EQ(rb.size(), 6u);
  for (size_t i = 0; i < ra.size(); ++i) EXPECT_EQ(ra[i], rb[i]) << "iteration " << i + 1;
}

// All F32 tensors of a model.safetensors file, flattened in header order.
std::map<std::string, std::vector<float>> read_f32_tensors(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, ' ');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, std::vector<float>> out;
  const nlohmann::json parsed = nlohmann::json::parse(header);
  for (const auto& [name, t] : parsed.items()) {
    if (name == "__metadata__") continue;
    const size_t begin = t["data_offsets"][0], end = t["data_offsets"][1];
    std::vector<float> v((end - begin) / 4);
    std::memcpy(v.data(), data.data() + begin, end - begin);
    out[name] = std::move(v);
  }
  return out;
}

double max_abs_difference(const fs::path& a, const fs::path& b) {
  auto ta = read_f32_tensors(a), tb = read_f32_tensors(b);
  EXPECT_EQ(ta.size(), tb.size());
  double worst = 0;
  for (const auto& [name, va] : ta) {
    const auto& vb = tb.at(name);
    EXPECT_EQ(va.size(), vb.size()) << name;
    for (size_t i = 0; i < va.size() && i < vb.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(va[i] - vb[i])));
    }
  }
  return worst;
}

// `stream` (eager micro-batches in arrival order) gives the same update as
// `disagg` (the full batch, packed longest first) and as `colocate` for the same samples. Adam's
// first step is lr * g / (|g| + eps): with the default eps a gradient component that cancels to
// ~0 can flip sign under float re-association, so the comparison uses eps = 1 (an update close
// to lr * g) to compare the gradients themselves. `disagg` hands its trainer and its SGS instance
// different device strings (the same CPU), so a path that ignores one of them still agrees only
// if it silently assumes the CPU; tests/gpu runs the same with CUDA.
TEST_F(RlTrain, StreamDisaggAndColocateGiveTheSameParameters) {
  for (const char* mode : {"colocate", "disagg", "stream"}) {
    std::vector<std::string> args = {"train",
                                     "--config",
                                     dir_ + "/rl.yaml",
                                     std::string("mode=") + mode,
                                     std::string("run.name=same_") + mode,
                                     "train.iterations=1",
                                     "train.micro_batch_tokens=64",
                                     "train.optim.lr=1",
                                     "train.optim.eps=1",
                                     "algo.entropy_coef=0.01",
                                     "eval.n=0",
                                     "--json"};
    if (std::string(mode) == "disagg") {
      args.insert(args.end(), {"run.device=cpu", "sgs.devices=[cpu:0]", "model.dtype=bfloat16"});
    }
    auto r = run_streamrl(args);
    ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.output;
  }
  const fs::path runs = fs::path(dir_) / "runs";
  const fs::path start = runs / "sft/final/model.safetensors";
  const fs::path disagg = runs / "same_disagg/final/model.safetensors";
  // The step really moved the parameters, by far more than the tolerance below (the tiny policy
  // rarely earns a reward, so the entropy bonus makes sure every token has a gradient).
  EXPECT_GT(max_abs_difference(start, disagg), 1e-4);
  EXPECT_LT(max_abs_difference(disagg, runs / "same_stream/final/model.safetensors"), 1e-6);
  EXPECT_LT(max_abs_difference(disagg, runs / "same_colocate/final/model.safetensors"), 1e-6);
}

// Dynamic sampling drops groups and refills them as they complete, which the streaming mode does
// during generation and the others after it: the same groups are dropped, the same refill prompts
// drawn and the same step taken. The overlong penalty (buffer 23 of 24 tokens) makes the rewards
// of a group differ by length, so that some groups are trained.
TEST_F(RlTrain, DynamicSamplingKeepsTheSameUpdateInEveryMode) {
  std::vector<nlohmann::json> dynamic, samples;
  for (const char* mode : {"colocate", "disagg", "stream"}) {
    auto r = run_streamrl(
        {"train", "--config", dir_ + "/rl.yaml", std::string("mode=") + mode,
         std::string("run.name=dyn_") + mode, "train.iterations=1", "train.micro_batch_tokens=64",
         "train.optim.lr=1", "train.optim.eps=1", "rollout.dynamic_sampling.enabled=true",
         "rollout.dynamic_sampling.max_refills=4", "algo.overlong.buffer=23",
         "data.curriculum=pass_rate", "eval.n=0", "telemetry.samples=true", "--json"});
    ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.output;
    for (const auto& rec : read_metrics(dir_ + "/runs/dyn_" + mode + "/metrics.jsonl")) {
      if (rec.contains("dynamic_sampling")) dynamic.push_back(rec["dynamic_sampling"]);
    }
    const auto logged = read_metrics(dir_ + "/runs/dyn_" + mode + "/samples.jsonl");
    ASSERT_EQ(logged.size(), 1u);
    samples.push_back(logged[0]);
  }
  ASSERT_EQ(dynamic.size(), 3u);
  EXPECT_EQ(dynamic[0], dynamic[1]);
  EXPECT_EQ(dynamic[0], dynamic[2]);
  EXPECT_LE(dynamic[0]["refills"].get<int>(), 4);
  // samples.jsonl groups by prompt, whatever order the samples came back in: the same in every
  // mode. Each refill names a dropped group (every advantage 0), which one depends on the order
  // the dropped groups completed in.
  for (const auto& logged : samples) {
    EXPECT_EQ(logged["lengths"], samples[0]["lengths"]);
    EXPECT_EQ(logged["zero_advantage"], samples[0]["zero_advantage"]);
    const auto released = logged["released_after"].get<std::vector<int>>();
    const auto zero = logged["zero_advantage"].get<std::vector<int>>();
    ASSERT_EQ(zero.size(), released.size() * 4);  // rl.yaml's group_size
    int refills = 0;
    for (size_t g = 0; g < released.size(); ++g) {
      if (released[g] < 0) continue;
      ++refills;
      ASSERT_LT(static_cast<size_t>(released[g]), g);
      for (int i = 0; i < 4; ++i) EXPECT_EQ(zero[released[g] * 4 + i], 1) << "group " << g;
    }
    EXPECT_EQ(refills, dynamic[0]["refills"].get<int>());
  }
  EXPECT_GT(dynamic[0]["refills"].get<int>(), 0);  // seed 3 drops groups: the check above ran
  const fs::path runs = fs::path(dir_) / "runs";
  const fs::path disagg = runs / "dyn_disagg/final/model.safetensors";
  EXPECT_GT(max_abs_difference(runs / "sft/final/model.safetensors", disagg), 1e-4);
  EXPECT_LT(max_abs_difference(disagg, runs / "dyn_stream/final/model.safetensors"), 1e-6);
  EXPECT_LT(max_abs_difference(disagg, runs / "dyn_colocate/final/model.safetensors"), 1e-6);
}

// trainer data parallelism. Two ranks under `streamrl launch`, each generating and
// training half of the prompts with the gradients and the global count summed, take the step one
// process takes on all of them (same tolerance setup as above).
TEST_F(RlTrain, TwoTrainerRanksGiveTheSameParametersAsOne) {
  const std::vector<std::string> launch2 = {"launch", "--nproc", "2", "--timeout", "240", "--"};
  auto one = run_streamrl(exact_update({}, "dp1", {"mode=disagg"}));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_streamrl(exact_update(launch2, "dp2", {"mode=disagg"}));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const fs::path runs = fs::path(dir_) / "runs";
  EXPECT_GT(max_abs_difference(runs / "sft/final/model.safetensors",
                               runs / "dp1/final/model.safetensors"),
            1e-4);
  EXPECT_LT(max_abs_difference(runs / "dp1/final/model.safetensors",
                               runs / "dp2/final/model.safetensors"),
            1e-5);
  // Rank 0 logs every iteration over all ranks' samples.
  int iterations = 0;
  for (const auto& rec : read_metrics((runs / "dp2/metrics.jsonl").string())) {
    if (!rec.contains("reward_mean")) continue;
    ++iterations;
    EXPECT_EQ(rec["samples"].get<int>(), 12);
    EXPECT_EQ(rec["trainer_ranks"].get<int>(), 2);
  }
  EXPECT_EQ(iterations, 2);
  // One trace with both ranks' trainer tracks, merged by rank 0.
  std::ifstream trace_in(runs / "dp2/trace.json");
  const auto trace = nlohmann::json::parse(trace_in);
  std::set<std::string> names;
  std::set<int> span_tracks;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M") names.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "X") span_tracks.insert(e["tid"].get<int>());
  }
  EXPECT_TRUE(names.count("trainer rank 0 (disagg)"));
  EXPECT_TRUE(names.count("trainer rank 1 (disagg)"));
  EXPECT_TRUE(span_tracks.count(1) && span_tracks.count(101));
  EXPECT_FALSE(fs::exists(runs / "dp2/trace.rank1.json"));
}

// The trainer as a pipeline (parallel.pp = 2): both ranks generate half of the prompts, then the
// replica's two stages train on the union through the pipeline schedule; in stream mode as in
// disagg, and in async mode as async, the weights end where one process's do. Each iteration
// records its step's plan; in async mode a step whose samples were all in before the previous one
// trained was planned meanwhile (planned_ahead), which depends on timing.
TEST_F(RlTrain, PipelineStagesGiveTheSameParametersAsOne) {
  const std::vector<std::string> launch2 = {"launch", "--nproc", "2", "--timeout", "240", "--"};
  for (const char* mode : {"disagg", "async"}) {
    auto one = run_streamrl(
        exact_update({}, std::string("pp_one_") + mode, {std::string("mode=") + mode}));
    ASSERT_EQ(one.exit_code, 0) << one.output;
  }
  const fs::path runs = fs::path(dir_) / "runs";
  // (mode, parallel.pp_waves): three passes per step train the groups in so far as they arrive.
  for (const auto& [mode, waves] : std::vector<std::pair<std::string, int>>{
           {"disagg", 1}, {"stream", 1}, {"async", 1}, {"stream", 3}, {"async", 2}}) {
    const std::string name = "pp2_" + mode + "_w" + std::to_string(waves);
    auto two = run_streamrl(exact_update(
        launch2, name,
        {"mode=" + mode, "parallel.pp=2", "parallel.pp_waves=" + std::to_string(waves)}));
    ASSERT_EQ(two.exit_code, 0) << two.output;
    const std::string one = "pp_one_" + std::string(mode == "async" ? "async" : "disagg");
    EXPECT_LT(max_abs_difference(runs / one / "final/model.safetensors",
                                 runs / (name + "/final/model.safetensors")),
              1e-5)
        << name;
    int iterations = 0;
    for (const auto& rec : read_metrics((runs / name / "metrics.jsonl").string())) {
      if (!rec.contains("reward_mean")) continue;
      ++iterations;
      const auto& pipe = rec["pipeline"];
      EXPECT_EQ(pipe["stages"], 2) << rec.dump();
      EXPECT_GE(pipe["micro_batches"].get<int>(), 1) << rec.dump();
      // The dynamic planner's choice ("<split> <order>"; the static ones are candidates too).
      EXPECT_NE(pipe["plan"].get<std::string>().find(' '), std::string::npos) << rec.dump();
      EXPECT_GE(pipe["planned_step_s"].get<double>(), 0) << rec.dump();
      EXPECT_GE(pipe["plan_s"].get<double>(), 0) << rec.dump();
      // Passes that trained samples: at least the last, at most one per wave (disagg: one).
      EXPECT_GE(pipe["waves"].get<int>(), 1) << rec.dump();
      EXPECT_LE(pipe["waves"].get<int>(), mode == "disagg" ? 1 : waves) << rec.dump();
      // Only async submits an iteration before the last one's step; the first has no step before.
      if (mode != "async" || iterations == 1) {
        EXPECT_FALSE(pipe["planned_ahead"].get<bool>()) << rec.dump();
      }
      std::printf("%s iteration %d: %d passes, planned_ahead %d, plan_wait_s %.4f\n", name.c_str(),
                  iterations, pipe["waves"].get<int>(), pipe["planned_ahead"].get<bool>() ? 1 : 0,
                  pipe["plan_wait_s"].get<double>());
    }
    EXPECT_EQ(iterations, 2) << name;
  }
  EXPECT_GT(max_abs_difference(runs / "sft/final/model.safetensors",
                               runs / "pp_one_disagg/final/model.safetensors"),
            1e-4);
  auto alone = run_streamrl(exact_update({}, "pp_alone", {"parallel.pp=2"}));
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  EXPECT_NE(alone.output.find("needs its ranks: run under streamrl launch"), std::string::npos)
      << alone.output;
}

// Expert parallelism (parallel.ep = 2, an MoE policy): each rank trains half of every layer's
// experts and trades tokens with the other; the generators and the saved model use the whole model,
// gathered on every rank after each step. In every mode the weights end where one process's do,
// also for two replicas of two expert ranks where one rank has no prompt of its own (3 prompts, 4
// ranks: it runs idle micro-batches so that its peer's all-to-alls have a partner).
TEST_F(RlTrain, ExpertParallelRanksGiveTheSameParametersAsOne) {
  const std::string moe_config = std::string(STREAMRL_TEST_DATA_DIR) + "/tiny_moe.json";
  auto sft = run_streamrl({"sft", "--config", testing_util::write_tiny_sft_config(dir_),
                           "run.name=sft_moe", "model.config=" + moe_config});
  ASSERT_EQ(sft.exit_code, 0) << sft.output;
  const std::string moe = "policy.init_from=" + dir_ + "/runs/sft_moe/final";
  auto one = run_streamrl(exact_update({}, "ep_one", {"mode=disagg", moe}));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const fs::path runs = fs::path(dir_) / "runs";
  EXPECT_GT(max_abs_difference(runs / "sft_moe/final/model.safetensors",
                               runs / "ep_one/final/model.safetensors"),
            1e-4);
  const std::vector<std::string> launch2 = {"launch", "--nproc", "2", "--timeout", "240", "--"};
  const std::vector<std::string> launch4 = {"launch", "--nproc", "4", "--timeout", "240", "--"};
  // The same policy as two pipeline stages (one MoE layer each) ends there too, with the router
  // statistics of both stages' layers in each iteration's record; with routing replay on, each
  // stage replays the engine's routing of its own layers (here the same as its own: no mismatch).
  const std::vector<std::tuple<std::vector<std::string>, std::string, std::string>> runs_of = {
      {launch2, "disagg", "ep2_disagg"},
      {launch2, "colocate", "ep2_colocate"},
      {launch4, "stream", "dp2_ep2_stream"},
      {launch2, "stream", "pp2_moe_stream"}};
  for (const auto& [launch, mode, name] : runs_of) {
    const bool pp = name.starts_with("pp2");
    auto r = run_streamrl(exact_update(
        launch, name,
        {"mode=" + mode, moe, pp ? "parallel.pp=2" : "parallel.ep=2", "checkpoint.every=0",
         std::string("algo.moe_routing_replay=") + (pp ? "true" : "false")}));
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.output;
    EXPECT_LT(max_abs_difference(runs / "ep_one/final/model.safetensors",
                                 runs / name / "final/model.safetensors"),
              1e-5)
        << name;
  }
  for (const auto& rec : read_metrics((runs / "pp2_moe_stream/metrics.jsonl").string())) {
    if (!rec.contains("reward_mean")) continue;
    EXPECT_EQ(rec["pipeline"]["stages"], 2) << rec.dump();
    EXPECT_EQ(rec["moe"]["two_expert_share"].size(), 2u) << rec.dump();
    EXPECT_GT(rec["moe"]["z_loss"].get<double>(), 0) << rec.dump();
    EXPECT_EQ(rec["moe"]["routing_mismatch"], 0.0) << "replayed on every stage: " << rec.dump();
  }
  // Checkpoints hold the whole model and one optimizer file per expert rank: a run resumed from
  // the first iteration's ends where the uninterrupted one did; another parallel.ep is refused.
  auto full = run_streamrl(exact_update(
      launch2, "ep2_ck", {moe, "parallel.ep=2", "checkpoint.every=1", "checkpoint.keep=4"}));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  for (const char* f : {"optimizer_ep0.pt", "optimizer_ep1.pt", "model.safetensors"}) {
    EXPECT_TRUE(fs::exists(runs / "ep2_ck/checkpoints/step_1" / f)) << f;
  }
  fs::create_directories(runs / "ep2_resumed/checkpoints");
  fs::copy(runs / "ep2_ck/checkpoints/step_1", runs / "ep2_resumed/checkpoints/step_1",
           fs::copy_options::recursive);
  auto resumed = run_streamrl(exact_update(
      launch2, "ep2_resumed", {moe, "parallel.ep=2", "checkpoint.every=1", "run.resume=true"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_LT(max_abs_difference(runs / "ep2_ck/final/model.safetensors",
                               runs / "ep2_resumed/final/model.safetensors"),
            1e-6);
  auto other_ep =
      run_streamrl(exact_update(launch2, "ep2_ck", {moe, "run.resume=true", "checkpoint.every=1"}));
  EXPECT_NE(other_ep.exit_code, 0);
  EXPECT_NE(other_ep.output.find("was written with parallel.ep = 2"), std::string::npos)
      << other_ep.output;
  // A dense policy has no experts to split.
  auto dense =
      run_streamrl(exact_update(launch2, "ep_dense", {"parallel.ep=2", "checkpoint.every=0"}));
  EXPECT_NE(dense.exit_code, 0);
  EXPECT_NE(dense.output.find("needs an MoE policy"), std::string::npos) << dense.output;
}

// train.mini_batches: several optimizer steps per iteration, each as its groups complete. With two
// streaming ranks and 3 mini-batches of 3 prompts, rank 0 holds 2 groups (quotas 1, 1, 0) and rank
// 1 one (1, 0, 0): every rank takes the same collective steps (no hang), the third, on no samples
// anywhere, leaves the weights alone, and the ranks end with the same weights (checked by the run).
TEST_F(RlTrain, MiniBatchesStepSeveralTimesPerIterationOnEveryRank) {
  auto r = run_streamrl({"launch", "--nproc", "2", "--timeout", "240", "--", "train", "--config",
                         dir_ + "/rl.yaml", "mode=stream", "run.name=mini", "train.iterations=2",
                         "train.mini_batches=3", "eval.n=0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int iterations = 0;
  for (const auto& rec : read_metrics(dir_ + "/runs/mini/metrics.jsonl")) {
    if (!rec.contains("reward_mean")) continue;
    ++iterations;
    EXPECT_EQ(rec["optimizer_steps"].get<int>(), 2) << rec.dump();
    EXPECT_EQ(rec["samples"].get<int>(), 12);
  }
  EXPECT_EQ(iterations, 2);
  auto bad = run_streamrl(
      {"train", "--config", dir_ + "/rl.yaml", "run.name=mini_bad", "train.mini_batches=4"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("train.mini_batches (4) must be between 1 and "
                            "rollout.prompts_per_iteration (3)"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(bad.output.find('\n'), bad.output.size() - 1) << "more than one line: " << bad.output;
}

// DSV beside RL updates: the predictors learn on every optimizer step, heads switch by the
// thresholds, the records carry the profile and the final checkpoint the predictors; dedicated
// engines receive them; several trainer ranks are refused (each would learn its own predictors).
TEST_F(RlTrain, SparseAttentionLearnsBesideTheUpdates) {
  const std::vector<std::string> dsv = {
      "model.sparse_attention.enabled=true",   "model.sparse_attention.rank=4",
      "model.sparse_attention.block=4",        "model.sparse_attention.keep=2",
      "model.sparse_attention.min_tokens=0",   "model.sparse_attention.stride=2",
      "model.sparse_attention.warmup_steps=1", "model.sparse_attention.sparsity_threshold=0",
      "model.sparse_attention.min_coverage=0", "model.sparse_attention.loss_threshold=100"};
  std::vector<std::string> args = {"train",        "--config",           dir_ + "/rl.yaml",
                                   "run.name=dsv", "train.iterations=2", "eval.n=0",
                                   "--json"};
  args.insert(args.end(), dsv.begin(), dsv.end());
  auto r = run_streamrl(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int records = 0;
  for (const auto& rec : read_metrics(dir_ + "/runs/dsv/metrics.jsonl")) {
    if (!rec.contains("reward_mean")) continue;
    ++records;
    ASSERT_TRUE(rec.contains("sparse_attention")) << rec.dump();
    EXPECT_EQ(rec["sparse_attention"]["observed"].get<int>(), records) << rec.dump();
    EXPECT_EQ(rec["sparse_attention"]["sparse_heads"].get<int>(), 8) << rec.dump();
  }
  EXPECT_EQ(records, 2);
  EXPECT_TRUE(fs::exists(dir_ + "/runs/dsv/final/sparse_attention.safetensors"));

  // Dedicated engines (stream mode) get the predictors and sparse heads with every weight sync
  // (a sync they refused would end the run).
  std::vector<std::string> streamed = args;
  streamed.push_back("mode=stream");
  streamed.push_back("run.name=dsv_stream");
  r = run_streamrl(streamed);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_metrics(dir_ + "/runs/dsv_stream/metrics.jsonl")
                .back()["sparse_attention"]["sparse_heads"]
                .get<int>(),
            8);

  std::vector<std::string> launched = {"launch", "--nproc", "2", "--timeout", "120", "--"};
  launched.insert(launched.end(), args.begin(), args.end());
  launched.push_back("run.name=dsv2");
  auto bad = run_streamrl(launched);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("model.sparse_attention trains in one process"), std::string::npos)
      << bad.output;
}

// Async: generation of iteration k runs with weights k-1, never older than the bound; every
// record names the versions it trained on; a trace and a report are written.
TEST_F(RlTrain, AsyncRespectsTheStalenessBound) {
  auto r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "mode=async", "run.name=async",
                         "train.iterations=4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int iterations = 0;
  for (const auto& rec : read_metrics(dir_ + "/runs/async/metrics.jsonl")) {
    if (!rec.contains("reward_mean")) continue;
    ++iterations;
    const int64_t trained_on = rec["weight_version"];
    const int64_t oldest = rec["sample_weight_version"]["min"];
    EXPECT_LE(trained_on - oldest, 1) << rec.dump();
    EXPECT_EQ(rec["staleness_max"].get<int64_t>(), trained_on - oldest);
    EXPECT_EQ(rec["refused_samples"].get<int64_t>(), 0);
    EXPECT_EQ(rec["samples"].get<int>(), 12);
    if (trained_on >= 1) EXPECT_EQ(oldest, trained_on - 1) << "async should run one step behind";
  }
  EXPECT_EQ(iterations, 4);
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "runs/async/trace.json"));
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "runs/async/report.html"));
  // The report's timeline shows the training work of the last iterations, and `streamrl report`
  // rewrites it.
  fs::remove(fs::path(dir_) / "runs/async/report.html");
  auto rep = run_streamrl({"report", "--run", dir_ + "/runs/async"});
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  std::ifstream html(fs::path(dir_) / "runs/async/report.html");
  const std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("<title>optimizer step"), std::string::npos);
  EXPECT_NE(page.find("<title>sample work"), std::string::npos);
  EXPECT_EQ(run_streamrl({"report", "--run", dir_ + "/no-such-run"}).exit_code, 2);

  // With a bound of 0 the one-step-old samples are refused, not trained on.
  r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "mode=async", "run.name=async0",
                    "train.iterations=3", "async.max_staleness=0", "eval.n=0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int64_t refused = 0;
  for (const auto& rec : read_metrics(dir_ + "/runs/async0/metrics.jsonl")) {
    if (!rec.contains("reward_mean")) continue;
    refused += rec["refused_samples"].get<int64_t>();
    EXPECT_EQ(rec["staleness_max"].get<int64_t>(), 0) << rec.dump();
  }
  EXPECT_GT(refused, 0);
}

// Two SGS instances with skew-aware dispatch: the length ranker is refitted online from the
// rollouts and its recall is logged; every sample still arrives and trains.
TEST_F(RlTrain, StreamWithTwoInstancesAndTheOnlineRanker) {
  auto r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "mode=stream", "run.name=sgs2",
                         "train.iterations=3", "sgs.instances=2", "sgs.dispatch=skew_aware",
                         "sgs.ranker.refit_every=1", "sgs.ranker.steps=20",
                         "sgs.ranker.hidden_size=16", "sgs.ranker.heads=2", "eval.n=0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int with_ranker = 0, iterations = 0;
  for (const auto& rec : read_metrics(dir_ + "/runs/sgs2/metrics.jsonl")) {
    if (!rec.contains("reward_mean")) continue;
    ++iterations;
    EXPECT_EQ(rec["samples"].get<int>(), 12);
    if (rec.contains("ranker")) ++with_ranker;
  }
  EXPECT_EQ(iterations, 3);
  EXPECT_GE(with_ranker, 2);
}

// with sgs.urls a `streamrl serve` process generates; each iteration's weights are
// pushed to it over HTTP before the next prompts, so iteration k trains on samples of version k.
TEST_F(RlTrain, StreamWithARemoteServeInstance) {
  testing_util::ServeProcess serve(dir_ + "/runs/sft/final");
  const std::string url = serve.wait_for_url();
  ASSERT_FALSE(url.empty());
  auto r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "mode=stream", "run.name=remote",
                         "train.iterations=2", "sgs.urls=[" + url + "]", "eval.n=0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int iterations = 0;
  for (const auto& rec : read_metrics(dir_ + "/runs/remote/metrics.jsonl")) {
    if (!rec.contains("reward_mean")) continue;
    ++iterations;
    EXPECT_EQ(rec["samples"].get<int>(), 12);
    const int64_t trained_on = rec["weight_version"];
    EXPECT_EQ(trained_on, iterations - 1);
    EXPECT_EQ(rec["sample_weight_version"]["min"].get<int64_t>(), trained_on) << rec.dump();
    EXPECT_EQ(rec["sample_weight_version"]["max"].get<int64_t>(), trained_on) << rec.dump();
  }
  EXPECT_EQ(iterations, 2);
  // DSV's predictors and sparse heads reach the remote engine with the weights (a push it refused
  // would end the run).
  r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "mode=stream", "run.name=remote_dsv",
                    "train.iterations=2", "sgs.urls=[" + url + "]", "eval.n=0",
                    "model.sparse_attention.enabled=true", "model.sparse_attention.rank=4",
                    "model.sparse_attention.block=4", "model.sparse_attention.keep=2",
                    "model.sparse_attention.min_tokens=0", "model.sparse_attention.warmup_steps=1",
                    "model.sparse_attention.sparsity_threshold=0",
                    "model.sparse_attention.min_coverage=0",
                    "model.sparse_attention.loss_threshold=100", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Remote generation needs a dedicated mode.
  r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "mode=colocate", "run.name=remote_c",
                    "sgs.urls=[" + url + "]"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

// The reward-hacking defect of issue 15: records with an "answer" but no "demonstration" and
// data.reward demonstration used to reward the empty completion; now the run stops before
// training with one line naming the field and the record.
TEST_F(RlTrain, DemonstrationRewardWithoutDemonstrationsIsOneLineError) {
  const std::string data = dir_ + "/no_demo.jsonl";
  std::ofstream(data) << "{\"prompt\": \"1+2=\", \"answer\": \"3\"}\n";
  auto r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "run.name=no_demo",
                         "data.jsonl=" + data, "data.reward=demonstration"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("streamrl: error: data.reward 'demonstration' needs a "
                          "\"demonstration\" field"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(data + ":1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "more than one line: " << r.output;
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "runs/no_demo/metrics.jsonl"));
}

TEST_F(RlTrain, UnknownModeAndMissingPolicyAreInputErrors) {
  auto r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "mode=nope"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "policy.init_from=/nonexistent"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace streamrl
