// What the HTTP server's translation units share (http_server.cc: routes, /generate, weights,
// health; http_server_openai.cc: the OpenAI endpoints): errors, JSON replies and request state.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "streamrl/core/errors.h"
#include "streamrl/core/log.h"
#include "streamrl/server/http_server.h"
#include "streamrl/server/openai_api.h"

namespace streamrl::server {

inline int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Ends a request with an HTTP status; the message is the response's one-line reason.
class HttpError : public std::runtime_error {
 public:
  HttpError(int status, const std::string& message) : std::runtime_error(message), status(status) {}
  int status;
};

inline std::string error_type(int status) {
  if (status == 504) return "timeout_error";
  return status < 500 ? "invalid_request_error" : "server_error";
}

// Compact JSON; invalid UTF-8 (which no decoder should produce) becomes U+FFFD, not a throw.
inline std::string to_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(to_text(body), "application/json");
}

inline void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, status, error_json(message, error_type(status)));
}

// Runs a handler and turns what it throws into an error response.
template <typename F>
void guarded(httplib::Response& res, F&& handler) {
  try {
    handler();
  } catch (const HttpError& e) {
    send_error(res, e.status, e.what());
  } catch (const InputError& e) {
    send_error(res, 400, e.what());
  } catch (const std::exception& e) {
    SLOG(kError) << "request failed: " << e.what();
    send_error(res, 500, e.what());
  }
}

// Holds a gauge up for as long as the owner lives.
class GaugeHold {
 public:
  explicit GaugeHold(std::atomic<int64_t>& g) : g_(g) { g_.fetch_add(1); }
  ~GaugeHold() { g_.fetch_sub(1); }
  GaugeHold(const GaugeHold&) = delete;
  GaugeHold& operator=(const GaugeHold&) = delete;

 private:
  std::atomic<int64_t>& g_;
};

// The state of one generation request. A streaming response's content provider owns it, so it
// dies with the response (finished, client gone, server stopping), aborting unfinished work.
struct Server::RequestState {
  explicit RequestState(std::atomic<int64_t>& inflight) : hold(inflight) {}
  GaugeHold hold;
  std::unique_ptr<Inflight> flight;
  Clock::time_point deadline;
  CompletionRequest completion;                // OpenAI endpoints only
  CompletionMeta meta;                         // OpenAI endpoints only
  std::unique_ptr<CompletionChoices> choices;  // OpenAI endpoints only
  int64_t prompt_tokens = 0;                   // OpenAI endpoints only
  std::vector<nlohmann::json> ids;             // /generate only: the client's id per job
  std::string run_id;                          // /generate only: the client's run ("" = any)
  int64_t run_changes = 0;                     // Server::run_changes_ at submission
  Clock::time_point last_write;                // /generate only: for keepalive lines
};

}  // namespace streamrl::server
