// The trainer's side of remote SGS instances: `streamrl serve` processes reached by
// URL. RemoteSgsClient talks to one instance: requests go out as `POST /generate` (token-id
// prompts, the caller's request ids) and every sample streams back as it finishes, on a client
// thread; weights go out as weight_wire buckets to `POST /update_weights`. Every wait is bounded;
// a failure names the URL and hands back the unfinished requests (RemoteSgsPool re-dispatches
// them to the live instances).
#pragma once

#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "streamrl/core/config.h"
#include "streamrl/engine/engine.h"

namespace httplib {
class Client;
}

namespace streamrl::dist {

// Every wait on a `streamrl serve` process is bounded by one of these (config keys under `sgs:`,
// see read()); the defaults notice a frozen instance (SIGSTOP, a hung host) within about 10 s.
struct RemoteSgsOptions {
  // The trainer run these weights and requests belong to, sent with both: an instance refuses
  // requests of another run than the one whose weights it holds, and takes any run's weights.
  // "" = RemoteSgsPool draws a fresh id, so a new or resumed trainer process is a new run.
  std::string run_id;
  double connect_timeout_s = 5;
  // Longest silence on a generate stream; the server sends an empty line after each second
  // without a finished sample, so only a frozen or vanished server stays silent this long.
  double stream_idle_timeout_s = 10;
  double weight_timeout_s = 10;  // longest wait for one weight bucket's answer
  double health_timeout_s = 5;
  // RemoteSgsPool checks /health of each instance with work outstanding this often and fails the
  // streams of one that does not answer within health_timeout_s; 0 = never (only stream errors
  // and idle timeouts count). A server answers health off its generation path.
  double health_interval_s = 3;
  size_t max_bucket_bytes = size_t{8} << 20;  // weight bucket size; the server takes up to 64 MiB
  size_t max_requests_per_post = 64;          // a larger batch goes out as several streams
  // A tool-using task's built-in tools: every request is a multi-turn rollout that the instance
  // runs to its end (each turn capped at max_new_tokens, at most max_turns replies).
  std::vector<std::string> tools;
  int max_turns = 8;

  // Reads connect_timeout_s, stream_idle_timeout_s, weight_timeout_s, health_timeout_s and
  // health_interval_s of `section` (a run config's `sgs:`) over the defaults; InputError for a
  // value that is not positive (health_interval_s may be 0).
  static RemoteSgsOptions read(const core::Config& section);
};

// Requests of an instance that failed, each with `n` reduced to the samples it had not delivered.
// Re-submitted elsewhere, their samples are numbered from 0 again; `missing` says which indices
// they stand for (RemoteSgsPool renumbers them).
struct FailedRequests {
  std::string url;
  std::string error;  // one line naming the URL and what failed
  std::vector<engine::Request> requests;
  std::vector<std::vector<int32_t>> missing;  // per request: its sample indices not delivered
};

class RemoteSgsClient {
 public:
  using FailureCallback = std::function<void(FailedRequests)>;

  // `url` like "http://127.0.0.1:8000" (scheme optional). `on_failure` runs on a client thread
  // when a generate stream fails (connection lost, server error line, stream ended early, idle
  // timeout); it receives that stream's unfinished requests. Connects lazily: no I/O here.
  RemoteSgsClient(std::string url, RemoteSgsOptions options, FailureCallback on_failure);
  ~RemoteSgsClient();  // close()

  // Cancels the open streams (their requests are dropped, not reported) and joins their threads;
  // later submits throw. Idempotent.
  void close();
  RemoteSgsClient(const RemoteSgsClient&) = delete;
  RemoteSgsClient& operator=(const RemoteSgsClient&) = delete;

  const std::string& url() const { return url_; }

  // Sends `requests` (prompt ids, n, sampling params, length estimate) as one or more POSTs on new
  // client threads and returns at once. The request id is folded into the seed sent, so equal
  // prompts of one batch draw different samples (the server keys randomness by prompt). Each
  // finished sample goes to its request's `on_sample`, on that client thread, with the request's
  // `request_id`. Throws InputError for a request without on_sample or prompt, or a request id that
  // is already outstanding here.
  void submit(std::vector<engine::Request> requests);

  // Ids of the requests sent and not yet complete (in flight, not failed).
  std::vector<int64_t> unfinished() const;
  // Samples requested and not yet delivered, over all unfinished requests (a load measure).
  int64_t outstanding_samples() const;
  // The first stream failure's message, "" while none failed.
  std::string error() const;

  // Fails every open stream now with `why` (one line naming the URL): their unfinished requests go
  // to on_failure. For a caller whose health check found the instance gone while its streams
  // still wait for bytes that will not come (a vanished host sends no reset).
  void abort_streams(const std::string& why);

  // Pushes the weight buckets (from encode_weight_buckets) of one version, in order, as run
  // options.run_id, and returns once the instance has installed them. Throws TimeoutError when a
  // bucket gets no answer within weight_timeout_s and RuntimeFailure (naming the URL) for an
  // unreachable instance or a rejected bucket.
  void push_weight_buckets(const std::vector<std::string>& buckets);
  // encode_weight_buckets(version, tensors, max_bucket_bytes), then push_weight_buckets.
  void update_weights(int64_t version,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors);

  // GET /health within health_timeout_s. Throws RuntimeFailure naming the URL when the instance
  // is unreachable or reports itself broken.
  struct Health {
    int64_t weight_version = 0;  // installed
    double busy_seconds = -1;    // engine time inside steps since start; -1 when not reported
  };
  Health health();

 private:
  struct Pending {
    engine::Request request;
    std::vector<bool> delivered;  // by sample_index
    int remaining = 0;
  };
  struct Stream {
    std::unique_ptr<httplib::Client> http;
    std::thread thread;
    std::vector<int64_t> ids;
    bool done = false;
  };

  std::unique_ptr<httplib::Client> make_http(double read_timeout_s) const;
  void run_stream(Stream* stream, std::string body);
  // Delivers one NDJSON line; returns an error message for an error line or a bad sample.
  std::string handle_line(const std::string& line);
  void fail_stream(Stream* stream, const std::string& error);
  void reap_finished_streams();

  const std::string url_;
  const RemoteSgsOptions options_;
  const FailureCallback on_failure_;
  std::atomic<bool> closing_{false};
  std::atomic<bool> aborting_{false};

  mutable std::mutex mu_;
  std::map<int64_t, Pending> pending_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::string error_;
  std::string abort_reason_;
};

}  // namespace streamrl::dist
