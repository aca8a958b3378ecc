// The HTTP face of one SGS instance (`streamrl serve`): an Engine stepped on its own
// EngineThread, behind OpenAI-compatible completions, the native streaming generate API, weight
// updates in the weight wire format, health and Prometheus metrics. Routes and formats are listed
// in http_server.cc; parsing lives in openai_api / native_api.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "streamrl/dist/weight_wire.h"
#include "streamrl/engine/engine.h"
#include "streamrl/engine/engine_thread.h"
#include "streamrl/server/inflight.h"
#include "streamrl/server/openai_api.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace streamrl::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 0;                         // 0 = any free port; see Server::port()
  std::string model_name = "streamrl";  // "model" in responses when a request names none
  int threads = 0;  // engine core budget (ATen + OpenBLAS threads); 0 = all available cores
  // Connections served at once, a thread each (a streaming response holds its thread
  // throughout): far more than the streams an engine serves, so a health check always finds one.
  // Idle threads only sleep.
  int http_threads = 256;
  size_t max_body_bytes = size_t{1} << 20;            // JSON request bodies; larger gets 413
  size_t max_weight_bucket_bytes = size_t{64} << 20;  // POST /update_weights bodies; larger: 413
  int64_t max_request_samples = 1024;             // sum of n over one request's prompts; more: 413
  int64_t max_request_tokens = int64_t{1} << 22;  // sum of n x (prompt + max new tokens); more: 413
  double request_timeout_s = 600;  // a generation request's deadline; then 504 and its work aborted
  RequestDefaults defaults;        // of sampling fields a request leaves out
  // Messages -> prompt ids with the checkpoint's chat template (/v1/chat/completions); without
  // one, chat requests get 400.
  ChatEncoder chat_encoder;
};

class Server {
 public:
  // Starts the engine thread (applying the core budget on it) and listens. Returns once the port
  // is bound; connections are accepted from then on. `engine` and `tok` must outlive the server,
  // and nothing else may step `engine`. Throws RuntimeFailure when the address cannot be bound.
  Server(engine::Engine& engine, const tokenizer::Tokenizer& tok, ServerConfig config);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound port (the chosen one when the config said 0).
  int port() const { return port_; }

  // Stops accepting, ends in-flight requests (503, or an error event on a stream; their engine work
  // is aborted), and joins the HTTP and engine threads. Idempotent. Not from an HTTP handler.
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  // How often a waiting handler wakes to check its deadline, the client and the server's state.
  static constexpr std::chrono::milliseconds kPollWait{50};
  struct RequestState;

  void route();
  // /v1/completions and /v1/chat/completions (http_server_openai.cc).
  void openai(const httplib::Request& req, httplib::Response& res, bool chat);
  void generate(const httplib::Request& req, httplib::Response& res);
  void update_weights(const httplib::Request& req, httplib::Response& res);
  void weights_version(httplib::Response& res);
  // The run whose weights are installed ("" = the checkpoint's own) and how many times another
  // run's weights replaced them.
  std::string installed_run() const;
  void health(httplib::Response& res);
  void metrics(httplib::Response& res);

  // Checks the request size limits (413) and submits `jobs` to the engine (with per-token events
  // when `per_token`).
  std::unique_ptr<Inflight> submit(const std::vector<PromptJob>& jobs, bool per_token = false);
  // Waits at most `wait` (one poll interval) for the next event. Throws HttpError: 504 past
  // `deadline`, 503 when stopping, 500 when the engine thread failed or a failed step aborted the
  // sample.
  std::optional<InflightEvent> next_sample(Inflight& flight, Clock::time_point deadline,
                                           std::chrono::milliseconds wait = kPollWait);
  Clock::time_point deadline() const;

  engine::Engine& engine_;
  const tokenizer::Tokenizer& tok_;
  const ServerConfig config_;
  const std::string id_suffix_;  // "<random>-": response ids are "cmpl-" or "chatcmpl-" + it + n
  const int64_t started_;        // Unix seconds, for /v1/models

  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> completion_ids_{0};
  std::atomic<int64_t> http_requests_{0};
  std::atomic<int64_t> inflight_requests_{0};
  std::atomic<int64_t> aborted_requests_{0};
  std::atomic<int64_t> weight_version_;  // version every request admitted from now on runs with
  std::atomic<int64_t> run_changes_{0};  // installs of another run's weights

  std::mutex weights_mu_;            // serialises weight updates
  dist::WeightAssembler assembler_;  // guarded by weights_mu_
  std::string assembler_run_;        // guarded by weights_mu_: the run of the pending buckets
  mutable std::mutex run_mu_;        // guards installed_run_ only, so /health never waits on it
  std::string installed_run_;

  std::unique_ptr<engine::EngineThread> engine_thread_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  std::thread listener_;
  std::atomic<bool> listener_done_{false};
  std::mutex stop_mu_;
};

}  // namespace streamrl::server
