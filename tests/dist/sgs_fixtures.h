// Shared pieces of the remote SGS tests: in-process `streamrl serve` instances on free ports, a
// thread-safe sample inbox, requests, and a host that accepts connections but never answers.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "../tiny_model.h"
#include "streamrl/dist/remote_sgs_pool.h"
#include "streamrl/server/http_server.h"

namespace streamrl::dist::sgs_testing {

using namespace std::chrono_literals;

inline model::CausalLM tiny_model(uint64_t seed) {
  return testing_util::tiny_model(seed, 100, 1024);
}

// One SGS instance: an engine behind the HTTP server on a free port.
struct Instance {
  explicit Instance(uint64_t seed) {
    engine::EngineConfig ec;
    ec.max_batch_size = 16;
    ec.max_seq_len = 1024;
    engine = std::make_unique<engine::Engine>(tiny_model(seed), ec);
    server::ServerConfig sc;
    sc.threads = 1;
    server = std::make_unique<server::Server>(*engine, *tok, sc);
    url = "http://127.0.0.1:" + std::to_string(server->port());
  }
  // The weight version the server reports installed (GET /health).
  int64_t server_version() const {
    httplib::Client c(url);
    auto res = c.Get("/health");
    return res ? nlohmann::json::parse(res->body).value("weight_version", int64_t{-1}) : -1;
  }
  std::unique_ptr<tokenizer::Tokenizer> tok = tokenizer::make_tokenizer("char");
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<server::Server> server;
  std::string url;
};

// Thread-safe collector of samples.
struct Inbox {
  void push(engine::Sample&& s) {
    std::lock_guard<std::mutex> lock(mu);
    samples.push_back(std::move(s));
    cv.notify_all();
  }
  bool wait_for(size_t n, std::chrono::seconds timeout = 60s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return samples.size() >= n; });
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return samples.size();
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<engine::Sample> samples;
};

inline engine::Request request(int64_t id, int n, int max_new_tokens, Inbox* inbox = nullptr) {
  engine::Request r;
  r.request_id = id;
  r.prompt_ids = {1, static_cast<int32_t>(5 + id % 50), 7};
  r.n = n;
  r.params.max_new_tokens = max_new_tokens;
  r.params.seed = 1000 + id;
  if (inbox) r.on_sample = [inbox](engine::Sample&& s) { inbox->push(std::move(s)); };
  return r;
}

// Eight requests of 2 samples: 0 and 1 end after one token, the rest run 300. Placement
// alternates between two instances, so when the first sample arrives the first instance still
// holds requests 2, 4 and 6. Fills `n_of` with each request's sample count.
inline std::vector<engine::Request> two_short_then_long(std::map<int64_t, int>* n_of) {
  std::vector<engine::Request> reqs;
  for (int64_t id = 0; id < 8; ++id) {
    reqs.push_back(request(id, 2, id < 2 ? 1 : 300));
    (*n_of)[id] = 2;
  }
  return reqs;
}

// Four requests of 2 samples, 6 tokens each; fills `n_of` with each request's sample count.
inline std::vector<engine::Request> four_pairs(std::map<int64_t, int>* n_of) {
  std::vector<engine::Request> reqs;
  for (int64_t id = 0; id < 4; ++id) {
    reqs.push_back(request(id, 2, 6));
    (*n_of)[id] = 2;
  }
  return reqs;
}

inline RemoteSgsOptions fast_options() {
  RemoteSgsOptions o;
  o.connect_timeout_s = 2;
  o.stream_idle_timeout_s = 30;
  o.weight_timeout_s = 10;
  o.health_timeout_s = 2;
  o.health_interval_s = 0;
  return o;
}

// Every request's samples arrived exactly once, with indices 0..n-1.
inline void expect_complete_groups(const std::vector<engine::Sample>& samples,
                                   const std::map<int64_t, int>& n_of) {
  std::map<int64_t, std::set<int32_t>> got;
  for (const auto& s : samples) {
    EXPECT_TRUE(got[s.request_id].insert(s.sample_index).second)
        << "request " << s.request_id << " sample " << s.sample_index << " arrived twice";
  }
  for (const auto& [id, n] : n_of) {
    ASSERT_EQ(got[id].size(), static_cast<size_t>(n)) << "request " << id;
    EXPECT_EQ(*got[id].rbegin(), n - 1) << "request " << id;
  }
}

// A host that vanished: TCP connections complete (the kernel's backlog) but nothing ever answers.
class BlackHole {
 public:
  BlackHole() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(listen(fd_, 64), 0);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    url = "http://127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  }
  ~BlackHole() { close(fd_); }
  std::string url;

 private:
  int fd_ = -1;
};

}  // namespace streamrl::dist::sgs_testing
