#include "streamrl/planner/emulator.h"

#include <gtest/gtest.h>

#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

InstanceModel constant_instance(double step, int max_batch) {
  InstanceModel m;
  m.step_seconds = [step](double, double) { return step; };
  m.max_batch = max_batch;
  return m;
}

Batch equal_batch(int samples, int length, int group_size = 1) {
  Batch b;
  b.group_size = group_size;
  for (int g = 0; g < samples / group_size; ++g) {
    b.prompt_tokens.push_back(10);
    b.estimate.push_back(length);
    for (int i = 0; i < group_size; ++i) b.output_tokens.push_back(length);
  }
  return b;
}

EmulatorInput trivial(Mode mode, int iterations) {
  EmulatorInput in;
  in.mode = mode;
  in.instances = {constant_instance(0.01, 64)};
  in.trainer.tokens_per_s = 1000;
  in.trainer.step_overhead_s = 0.5;
  in.weight_update_s = 0.25;
  for (int k = 0; k < iterations; ++k) in.batches.push_back(equal_batch(8, 100));
  return in;
}

// Equal lengths on one instance: generation is 100 steps of 10 ms = 1 s; training is 8 x 110
// tokens at 1000 tokens/s = 0.88 s plus a 0.5 s optimizer step.
TEST(Emulator, ColocateEqualLengthsOneInstance) {
  EmulatorResult r = emulate(trivial(Mode::kColocate, 2));
  ASSERT_EQ(r.iterations.size(), 2u);
  EXPECT_NEAR(r.iterations[0].gen_end, 1.0, 1e-9);
  EXPECT_NEAR(r.iterations[0].train_end, 2.38, 1e-9);
  EXPECT_NEAR(r.iteration_seconds, 2.38, 1e-9);  // colocate pushes no weights
  EXPECT_NEAR(r.samples_per_s, 16 / 4.76, 1e-9);
  EXPECT_NEAR(r.gen_idle_fraction, 1 - 2.0 / 4.76, 1e-9);
  EXPECT_NEAR(r.train_idle_fraction, 1 - 2 * 1.38 / 4.76, 1e-9);
}

TEST(Emulator, DisaggAddsTheWeightPush) {
  EmulatorResult r = emulate(trivial(Mode::kDisagg, 3));
  EXPECT_NEAR(r.iteration_seconds, 2.38 + 0.25, 1e-9);
  EXPECT_NEAR(r.iterations[1].gen_start, 2.63, 1e-9);
}

TEST(Emulator, AsyncIterationIsTheSlowerStage) {
  // Generation 1 s per batch, training 1.38 s: async runs at the trainer's pace once filled.
  EmulatorResult r = emulate(trivial(Mode::kAsync, 5));
  EXPECT_NEAR(r.steady_iteration_seconds, 1.38, 1e-9);
  EXPECT_NEAR(r.iterations[1].gen_start, 1.0, 1e-9);  // no wait for weights at iteration 1
  // Staleness bound: generation k never starts before weights k-1 are installed.
  for (size_t k = 2; k < r.iterations.size(); ++k) {
    EXPECT_GE(r.iterations[k].gen_start, r.iterations[k - 2].weights_ready - 1e-12);
  }
}

TEST(Emulator, BatchLimitMakesRounds) {
  // 4 equal samples, 2 slots, step 10 ms + 1 ms per sequence: two rounds of 100 x 12 ms.
  InstanceModel m;
  m.step_seconds = [](double bs, double) { return 0.01 + 0.001 * bs; };
  m.max_batch = 2;
  GenerationResult g = simulate_generation({m}, equal_batch(4, 100), Dispatch::kRandom, 0, 0.2, 0);
  EXPECT_NEAR(g.end, 2.4, 1e-9);
  EXPECT_NEAR(g.finish[0], 1.2, 1e-9);
  EXPECT_NEAR(g.busy[0], 2.4, 1e-9);
}

TEST(Emulator, StreamOverlapsTrainingWithTheTail) {
  // One long sample and seven short ones: stream trains the short ones while the long one decodes.
  EmulatorInput in = trivial(Mode::kDisagg, 2);
  in.trainer.micro_batch_tokens = 100;
  for (auto& b : in.batches) b.output_tokens[0] = b.estimate[0] = 400;
  EmulatorResult disagg = emulate(in);
  in.mode = Mode::kStream;
  EmulatorResult stream = emulate(in);
  EXPECT_NEAR(stream.iterations[0].gen_end, 4.0, 1e-9);
  // After the long sample ends only its own micro-batch (410 tokens) and the step remain.
  EXPECT_NEAR(stream.iterations[0].train_end, 4.0 + 0.41 + 0.5, 1e-9);
  EXPECT_LT(stream.iteration_seconds, disagg.iteration_seconds);
  EXPECT_NEAR(disagg.iterations[0].train_end, 4.0 + 1.18 + 0.5, 1e-9);
}

TEST(Emulator, PaddedTrainerChargesThePackingOfEachMicroBatch) {
  // Sequences of 110, 60, 20, 20 tokens (prompt 10) packed longest first into micro-batches of at
  // most 120 padded tokens: [110], [60, 20], [20] -> 110 + 120 + 20 = 250 padded tokens, 210
  // real. At 1000 tokens/s: 0.25 s padded, 0.21 s real, plus the 0.5 s step.
  EmulatorInput in = trivial(Mode::kDisagg, 1);
  in.trainer.micro_batch_tokens = 120;
  Batch& b = in.batches[0];
  b = equal_batch(4, 10);
  b.output_tokens = {100, 50, 10, 10};
  in.trainer.padded = false;
  const double real = emulate(in).train_seconds;
  in.trainer.padded = true;
  const double padded = emulate(in).train_seconds;
  EXPECT_NEAR(real, 0.21 + 0.5, 1e-9);
  EXPECT_NEAR(padded, 0.25 + 0.5, 1e-9);
  // Streaming, the partly filled last micro-batch waits for later samples: packing everything at
  // the end is the same here, so stream charges the same padding as disagg.
  in.mode = Mode::kStream;
  EXPECT_NEAR(emulate(in).train_seconds, 0.25 + 0.5, 1e-9);
}

TEST(Emulator, GroupsAreAdmittedAndTrainedTogether) {
  InstanceModel m = constant_instance(0.01, 4);
  Batch b = equal_batch(8, 50, 4);
  b.output_tokens[1] = 100;  // group 0 finishes when its longest sample does
  GenerationResult g = simulate_generation({m}, b, Dispatch::kRandom, 0, 0.2, 0);
  // Group 1 waits for all four slots: admitted at 1.0 s when group 0's last sample finishes.
  EXPECT_NEAR(g.finish[0], 0.5, 1e-9);
  EXPECT_NEAR(g.finish[1], 1.0, 1e-9);
  EXPECT_NEAR(g.finish[4], 1.5, 1e-9);
}

// Dynamic sampling: group 2 refills group 0 (dropped), so it is submitted only once group 0 is
// in (1 s), or in whole-batch modes once the whole first wave is (group 1 at 3 s).
Batch refill_batch() {
  Batch b = equal_batch(3, 100);
  b.output_tokens[1] = b.estimate[1] = 300;
  b.released_after = {-1, -1, 0};
  return b;
}

TEST(Emulator, RefillsWaitForTheGroupTheyReplace) {
  const Batch b = refill_batch();
  // On any of two instances (the refill's trigger may decode on the other one), the same times.
  for (uint64_t seed = 0; seed < 6; ++seed) {
    const std::vector<InstanceModel> two(2, constant_instance(0.01, 64));
    GenerationResult g = simulate_generation(two, b, Dispatch::kRandom, 0, 0.2, seed);
    EXPECT_NEAR(g.finish[2], 2.0, 1e-9);
    EXPECT_NEAR(g.end, 3.0, 1e-9);
    g = simulate_generation(two, b, Dispatch::kRandom, 0, 0.2, seed, nullptr, 0,
                            RefillRelease::kOnWave);
    EXPECT_NEAR(g.finish[2], 4.0, 1e-9);
    EXPECT_NEAR(g.end, 4.0, 1e-9);
    // Busy time counts decoding, not the wait for the release: group 1 for 3 s, the refill 1 s,
    // group 0's second unless it decoded beside group 1.
    EXPECT_NEAR(g.busy[0] + g.busy[1], g.instance_of_group[0] == g.instance_of_group[1] ? 4.0 : 5.0,
                1e-9);
  }
  // Without the release, the refill decodes beside the others from the start.
  Batch all_at_once = b;
  all_at_once.released_after.clear();
  EXPECT_NEAR(
      simulate_generation({constant_instance(0.01, 64)}, all_at_once, Dispatch::kRandom, 0, 0.2, 0)
          .finish[2],
      1.0, 1e-9);
}

TEST(Emulator, WholeBatchModesRefillAfterTheWaveStreamingOnesOnArrival) {
  EmulatorInput in = trivial(Mode::kColocate, 1);
  in.batches[0] = refill_batch();
  EXPECT_NEAR(emulate(in).iterations[0].gen_end, 4.0, 1e-9);
  in.mode = Mode::kStream;
  EXPECT_NEAR(emulate(in).iterations[0].gen_end, 3.0, 1e-9);
}

TEST(Emulator, RejectsReleasesThatNeverHappen) {
  Batch b = refill_batch();
  b.released_after = {1, 0, -1};  // a cycle
  EXPECT_THROW(b.check(), InputError);
  b.released_after = {-1, -1, 3};  // no such group
  EXPECT_THROW(b.check(), InputError);
  b.released_after = {-1, -1, 2};  // itself
  EXPECT_THROW(b.check(), InputError);
  b.released_after = {-1, 0};  // one per group
  EXPECT_THROW(b.check(), InputError);
  b.released_after = {-1, 2, 0};  // a refill of a refill: third wave
  EXPECT_EQ(b.wave(1), 2);
}

TEST(Emulator, SkewAwareBeatsRandomOnALongTail) {
  // A fifth of the prompts are 20x longer; four instances whose step time grows with batch.
  InstanceModel m;
  m.step_seconds = [](double bs, double) { return 0.008 + 0.0004 * bs; };
  m.max_batch = 64;
  Batch b = equal_batch(128, 100);
  for (int g = 0; g < 128; g += 5) b.output_tokens[g] = b.estimate[g] = 2000;
  std::vector<InstanceModel> four(4, m);
  EXPECT_EQ(skew_aware_long_instances(m, 1, b, 0.2), 0);
  const int nl = skew_aware_long_instances(m, 4, b, 0.2);
  EXPECT_GE(nl, 1);
  EXPECT_LE(nl, 3);
  double random = 0;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    random += simulate_generation(four, b, Dispatch::kRandom, 0, 0.2, seed).end / 5;
  }
  const double skew = simulate_generation(four, b, Dispatch::kSkewAware, 0, 0.2, 0).end;
  EXPECT_LT(skew, random);
}

TEST(Emulator, TraceIsWellFormedChromeTraceJson) {
  EmulatorInput in = trivial(Mode::kStream, 2);
  in.trainer.micro_batch_tokens = 200;
  in.trace = true;
  EmulatorResult r = emulate(in);
  const nlohmann::json j = nlohmann::json::parse(r.trace.to_json().dump());
  ASSERT_TRUE(j.contains("traceEvents"));
  int spans = 0, names = 0;
  bool has_decode = false, has_train = false, has_weights = false;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e.at("ph");
    ASSERT_TRUE(ph == "X" || ph == "M");
    e.at("pid").get<int>();
    if (ph == "M") {
      ++names;
      EXPECT_FALSE(e.at("args").at("name").get<std::string>().empty());
      continue;
    }
    ++spans;
    EXPECT_GE(e.at("ts").get<double>(), 0);
    EXPECT_GE(e.at("dur").get<double>(), 0);
    e.at("tid").get<int>();
    const std::string name = e.at("name");
    has_decode |= name == "decode";
    has_train |= name == "train micro-batch";
    has_weights |= name == "weight transfer";
  }
  EXPECT_GE(names, 4);  // two processes, instance + trainer + transfer tracks
  EXPECT_GT(spans, 0);
  EXPECT_TRUE(has_decode && has_train && has_weights);
}

TEST(Emulator, RejectsBadInput) {
  EmulatorInput in = trivial(Mode::kColocate, 1);
  in.batches[0].output_tokens[0] = 0;
  EXPECT_THROW(emulate(in), InputError);
  in = trivial(Mode::kColocate, 1);
  in.instances.clear();
  EXPECT_THROW(emulate(in), InputError);
  EXPECT_THROW(parse_mode("sync"), InputError);
  EXPECT_THROW(parse_dispatch("rr"), InputError);
}

}  // namespace
}  // namespace streamrl::planner
