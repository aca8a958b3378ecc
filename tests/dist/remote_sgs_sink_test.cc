// The remote pool delivers through the same sink as the in-process pool: each sample comes with
// the index (among the pool's URLs) of the instance that produced it.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <set>

#include "sgs_fixtures.h"
#include "streamrl/dist/remote_sgs_pool.h"

namespace streamrl::dist {
namespace {

using namespace sgs_testing;  // NOLINT: the shared fixtures of sgs_fixtures.h

TEST(RemoteSgsPool, SinkIsToldWhichInstanceProducedEachSample) {
  Instance a(1), b(1);
  Inbox inbox;
  std::mutex mu;
  std::map<int64_t, std::set<int>> instances_of;  // by request id
  RemoteSgsPool pool({a.url, b.url}, fast_options(), [&](int instance, engine::Sample&& s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      instances_of[s.request_id].insert(instance);
    }
    inbox.push(std::move(s));
  });
  std::map<int64_t, int> n_of;
  pool.submit(four_pairs(&n_of));
  ASSERT_TRUE(inbox.wait_for(8)) << inbox.size() << " of 8 samples";
  expect_complete_groups(inbox.samples, n_of);
  // Least-loaded placement over idle instances alternates a, b, a, b.
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [id, instances] : instances_of) {
    EXPECT_EQ(instances, std::set<int>{static_cast<int>(id % 2)}) << "request " << id;
  }
  EXPECT_GT(pool.busy_seconds(), 0.0);
}

}  // namespace
}  // namespace streamrl::dist
