// Remote SGS faults that the first version got wrong (issue 14): a second or resumed run against
// long-lived instances installs its own weights and never receives the first run's samples, and
// with the default options a frozen instance is noticed, for generation and for a weight push,
// within about ten seconds; the timeouts are config keys.
#include <gtest/gtest.h>

#include <future>

#include "sgs_fixtures.h"
#include "streamrl/core/clock.h"
#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"

namespace streamrl::dist {
namespace {

using namespace std::chrono_literals;
using namespace sgs_testing;  // NOLINT: the shared fixtures of sgs_fixtures.h

TEST(RemoteSgsRuns, ANewRunTakesTheInstancesOverAndTheOldOneIsRefused) {
  Instance inst(1);
  Inbox first_inbox, second_inbox;
  RemoteSgsPool first({inst.url}, fast_options(),
                      [&](engine::Sample&& s) { first_inbox.push(std::move(s)); });
  first.update_weights(5, tiny_model(2)->named_weights());
  first.submit({request(1, 2, 4)});
  ASSERT_TRUE(first_inbox.wait_for(2));
  for (const auto& s : first_inbox.samples) EXPECT_EQ(s.weight_version, 5);

  // A second run (a new job, or the first one resumed in a new process) starts at version 1.
  RemoteSgsPool second({inst.url}, fast_options(),
                       [&](engine::Sample&& s) { second_inbox.push(std::move(s)); });
  EXPECT_NE(second.run_id(), first.run_id());
  second.update_weights(1, tiny_model(3)->named_weights());
  second.submit({request(2, 3, 4)});
  ASSERT_TRUE(second_inbox.wait_for(3));
  for (const auto& s : second_inbox.samples) EXPECT_EQ(s.weight_version, 1);

  // The first run's next requests are refused: no sample of the second run's weights reaches it.
  first.submit({request(3, 1, 4)});
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (!first.live_urls().empty() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(10ms);
  }
  try {
    first.check_alive();
    ADD_FAILURE() << "the first run still uses an instance the second run took over";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find(second.run_id()), std::string::npos) << e.what();
  }
  EXPECT_EQ(first_inbox.size(), 2u);
}

TEST(RemoteSgsDefaults, AFrozenInstanceIsNoticedWithinTenSeconds) {
  BlackHole frozen;
  Instance live(1);
  Inbox inbox;
  RemoteSgsPool pool({frozen.url, live.url}, RemoteSgsOptions{},
                     [&](engine::Sample&& s) { inbox.push(std::move(s)); });
  std::map<int64_t, int> n_of;
  std::vector<engine::Request> reqs = four_pairs(&n_of);
  const auto start = std::chrono::steady_clock::now();
  pool.submit(std::move(reqs));
  // The frozen instance's share comes back from the live one once it is noticed.
  ASSERT_TRUE(inbox.wait_for(8, 12s)) << inbox.size() << " of 8 samples";
  std::printf("frozen instance noticed, its requests re-dispatched in %.2f s\n",
              core::seconds_since(start));
  expect_complete_groups(inbox.samples, n_of);
  EXPECT_EQ(pool.live_urls(), std::vector<std::string>{live.url});
}

TEST(RemoteSgsDefaults, AWeightPushToAFrozenInstanceGivesUpWithinTenSeconds) {
  BlackHole frozen;
  Instance live(1);
  RemoteSgsPool pool({frozen.url, live.url}, RemoteSgsOptions{}, [](engine::Sample&&) {});
  const auto start = std::chrono::steady_clock::now();
  auto push = std::async(std::launch::async,
                         [&] { pool.update_weights(1, tiny_model(2)->named_weights()); });
  ASSERT_EQ(push.wait_for(20s), std::future_status::ready) << "the weight push still waits";
  push.get();  // the live instance installed it
  std::printf("weight push to a frozen instance gave up after %.2f s\n",
              core::seconds_since(start));
  EXPECT_EQ(live.server_version(), 1);
  EXPECT_EQ(pool.live_urls(), std::vector<std::string>{live.url});
}

TEST(RemoteSgsDefaults, TimeoutsAreConfigKeys) {
  const auto config = core::Config::from_string(
      "sgs: {connect_timeout_s: 1, stream_idle_timeout_s: 2, weight_timeout_s: 3, "
      "health_timeout_s: 4, health_interval_s: 0}");
  const RemoteSgsOptions o = RemoteSgsOptions::read(config.section("sgs"));
  EXPECT_EQ(o.connect_timeout_s, 1);
  EXPECT_EQ(o.stream_idle_timeout_s, 2);
  EXPECT_EQ(o.weight_timeout_s, 3);
  EXPECT_EQ(o.health_timeout_s, 4);
  EXPECT_EQ(o.health_interval_s, 0);
  try {
    RemoteSgsOptions::read(core::Config::from_string("sgs: {weight_timeout_s: 0}").section("sgs"));
    ADD_FAILURE() << "a zero timeout was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sgs.weight_timeout_s"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace streamrl::dist
