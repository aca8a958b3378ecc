// Samples as bytes between trainer ranks: every field the loss reads survives the trip, and
// truncated or padded bytes are an error, never a short batch.
#include "streamrl/rl/trajectory.h"

#include <gtest/gtest.h>

#include "streamrl/core/errors.h"

namespace streamrl::rl {
namespace {

TEST(SampleBytes, RoundTripKeepsWhatTheLossReads) {
  std::vector<ScoredSample> in(2);
  in[0].sample.request_id = 7, in[0].sample.sample_index = 3;
  in[0].sample.prompt_ids = {1, 5, 9};
  in[0].sample.output_ids = {4, 4, 2};
  in[0].sample.logprobs = {-0.5f, -1.25f, -0.125f};
  in[0].sample.sampled_mask = {1, 0, 1};
  in[0].sample.weight_version = 11, in[0].sample.turns = 2;
  in[0].score = 1, in[0].reward = 0.75, in[0].advantage = -0.3, in[0].difficulty = 2;
  in[0].ref_logprobs = {-0.4f, -1.0f, -0.2f};
  in[0].sample.routed_experts = {0, 3, -1, 2, 1, 1};  // MoE routing replay: 3 positions x 1 x 2
  in[0].sample.routing_layers = 1, in[0].sample.routing_k = 2;
  in[1].sample.request_id = 8;  // empty vectors survive too
  const std::vector<ScoredSample> out = decode_samples(encode_samples(in));
  ASSERT_EQ(out.size(), 2u);
  const ScoredSample& a = out[0];
  EXPECT_EQ(a.sample.request_id, 7);
  EXPECT_EQ(a.sample.sample_index, 3);
  EXPECT_EQ(a.sample.prompt_ids, in[0].sample.prompt_ids);
  EXPECT_EQ(a.sample.output_ids, in[0].sample.output_ids);
  EXPECT_EQ(a.sample.logprobs, in[0].sample.logprobs);
  EXPECT_EQ(a.sample.sampled_mask, in[0].sample.sampled_mask);
  EXPECT_EQ(a.sample.weight_version, 11);
  EXPECT_EQ(a.sample.turns, 2);
  EXPECT_EQ(a.score, 1);
  EXPECT_EQ(a.reward, 0.75);
  EXPECT_EQ(a.advantage, -0.3);
  EXPECT_EQ(a.difficulty, 2);
  EXPECT_EQ(a.ref_logprobs, in[0].ref_logprobs);
  EXPECT_EQ(a.sample.routed_experts, in[0].sample.routed_experts);
  EXPECT_EQ(a.sample.routing_layers, 1);
  EXPECT_EQ(a.sample.routing_k, 2);
  EXPECT_EQ(out[1].sample.request_id, 8);
  EXPECT_TRUE(out[1].sample.output_ids.empty());
  EXPECT_TRUE(decode_samples(encode_samples({})).empty());
}

TEST(SampleBytes, TruncatedOrTrailingBytesAreErrors) {
  std::vector<ScoredSample> in(1);
  in[0].sample.output_ids = {1, 2, 3};
  const std::string bytes = encode_samples(in);
  for (size_t cut : {size_t{0}, size_t{4}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_THROW(decode_samples(bytes.substr(0, cut)), RuntimeFailure) << cut;
  }
  EXPECT_THROW(decode_samples(bytes + "x"), RuntimeFailure);
  std::string huge = bytes;
  huge[0] = '\xff';  // a sample count far beyond the bytes
  EXPECT_THROW(decode_samples(huge), RuntimeFailure);
}

}  // namespace
}  // namespace streamrl::rl
