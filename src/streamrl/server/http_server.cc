// Routing, streaming and lifetime of the SGS HTTP server (see http_server.h). Routes:
//   POST /v1/completions  OpenAI text completions (openai_api.h); with "stream": true, server-sent
//                         events, one chunk per finished choice (samples finish whole), then
//                         "data: [DONE]".
//   POST /generate        native batch (native_api.h); the response is chunked NDJSON, one line per
//                         finished sample in completion order; a failure after the first byte ends
//                         the stream with an {"error": ...} line.
//   POST /update_weights  one weight_wire bucket -> {version, complete, buckets_received,
//                         bucket_count}; the last bucket of a version installs it.
//   GET  /weights/version {version, pending: null | {version, buckets_received, bucket_count}}
//   GET  /health          {status: "ok", weight_version} (503 once the engine thread failed)
//   GET  /metrics         Prometheus text (metrics_text.h)
// Errors are {"error": {message, type, param, code}}: 400 bad JSON or parameters, 404 unknown
// route, 413 body or request too large, 500 engine failure, 503 stopping, 504 timeout.
// A client that leaves a streaming response has its engine work aborted within one poll interval;
// a non-streaming request runs to completion or to its timeout, because httplib does not expose
// the connection to a plain handler.
#include "streamrl/server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <random>

#include "streamrl/core/errors.h"
#include "streamrl/core/log.h"
#include "streamrl/core/threads.h"
#include "streamrl/server/metrics_text.h"
#include "streamrl/server/native_api.h"
#include "streamrl/server/openai_api.h"

namespace streamrl::server {
namespace {

// How often a waiting handler wakes to check its deadline, the client and the server's state.
constexpr std::chrono::milliseconds kPollInterval{50};

// Ends a request with an HTTP status; the message is the response's one-line reason.
class HttpError : public std::runtime_error {
 public:
  HttpError(int status, const std::string& message) : std::runtime_error(message), status(status) {}
  int status;
};

std::string error_type(int status) {
  if (status == 504) return "timeout_error";
  return status < 500 ? "invalid_request_error" : "server_error";
}

// Compact JSON; invalid UTF-8 (which no decoder should produce) becomes U+FFFD, not a throw.
std::string to_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(to_text(body), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
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

std::string random_hex() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// The state of one generation request. A streaming response's content provider owns it, so it
// dies with the response (finished, client gone, server stopping), aborting unfinished work.
struct Server::RequestState {
  explicit RequestState(std::atomic<int64_t>& inflight) : hold(inflight) {}
  GaugeHold hold;
  std::unique_ptr<Inflight> flight;
  Clock::time_point deadline;
  CompletionRequest completion;  // /v1/completions only
  CompletionMeta meta;           // /v1/completions only
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::vector<nlohmann::json> ids;  // /generate only: the client's id per job
};

Server::Server(engine::Engine& engine, const tokenizer::Tokenizer& tok, ServerConfig config)
    : engine_(engine),
      tok_(tok),
      config_(std::move(config)),
      id_prefix_("cmpl-" + random_hex() + "-"),
      weight_version_(engine.stats().weight_version) {
  http_ = std::make_unique<httplib::Server>();
  http_->new_task_queue = [n = config_.http_threads] { return new httplib::ThreadPool(n); };
  // httplib's default also sets SO_REUSEPORT, which lets a second server bind the same port and
  // silently take half its connections; a port in use must be an error instead.
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http_->set_payload_max_length(std::max(config_.max_body_bytes, config_.max_weight_bucket_bytes));
  route();
  port_ = config_.port == 0 ? http_->bind_to_any_port(config_.host)
                            : (http_->bind_to_port(config_.host, config_.port) ? config_.port : -1);
  if (port_ <= 0) {
    throw RuntimeFailure("cannot listen on " + config_.host + ":" + std::to_string(config_.port));
  }
  // The engine thread starts only once the port is ours: a server that fails to bind must not
  // step an engine that may already have another server.
  const int threads = config_.threads > 0 ? config_.threads : core::available_cores();
  engine_thread_ = std::make_unique<engine::EngineThread>(
      engine_, [threads] { core::apply_core_budget(threads); });
  listener_ = std::thread([this] {
    http_->listen_after_bind();
    listener_done_.store(true);
  });
  // httplib's stop() is a no-op until the accept loop runs, so a stop() right after construction
  // would leave the listener blocked in accept() forever.
  while (!http_->is_running() && !listener_done_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Server::~Server() { stop(); }

void Server::stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (!listener_.joinable()) return;
  // Waiting handlers see stopping_ within one poll interval and return, so the HTTP pool can join.
  stopping_.store(true);
  http_->stop();
  listener_.join();
  engine_thread_->stop();
}

void Server::route() {
  // Per-route body limits are checked on Content-Length before the body is read.
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    http_requests_.fetch_add(1);
    const size_t limit =
        req.path == "/update_weights" ? config_.max_weight_bucket_bytes : config_.max_body_bytes;
    const std::string length = req.get_header_value("Content-Length");
    if (!length.empty() && std::strtoull(length.c_str(), nullptr, 10) > limit) {
      send_error(res, 413,
                 "request body exceeds " + std::to_string(limit) + " bytes for " + req.path);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Statuses that httplib sets itself (404, 413 past the global limit, 400 bad HTTP) get the same
  // JSON error shape as ours.
  http_->set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message = "HTTP " + std::to_string(res.status);
        if (res.status == 404) message = "no route for " + req.method + " " + req.path;
        if (res.status == 413) message = "request body too large";
        send_error(res, res.status, message);
        return httplib::Server::HandlerResponse::Handled;
      }));
  http_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        guarded(res, [&] { std::rethrow_exception(ep); });
      });
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { completions(req, res); });
  });
  http_->Post("/generate", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { generate(req, res); });
  });
  http_->Post("/update_weights", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { update_weights(req, res); });
  });
  http_->Get("/weights/version", [this](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] { weights_version(res); });
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] { health(res); });
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] { metrics(res); });
  });
}

Server::Clock::time_point Server::deadline() const {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(config_.request_timeout_s));
}

std::unique_ptr<Inflight> Server::submit(const std::vector<PromptJob>& jobs) {
  int64_t samples = 0, tokens = 0;
  for (const auto& j : jobs) {
    samples += j.n;
    tokens += j.n * (static_cast<int64_t>(j.prompt_ids.size()) + j.params.max_new_tokens);
  }
  if (samples > config_.max_request_samples) {
    throw HttpError(413, "request asks for " + std::to_string(samples) + " samples, more than " +
                             std::to_string(config_.max_request_samples));
  }
  if (tokens > config_.max_request_tokens) {
    throw HttpError(413, "request asks for " + std::to_string(tokens) +
                             " prompt + output tokens, more than " +
                             std::to_string(config_.max_request_tokens));
  }
  if (stopping_.load()) throw HttpError(503, "server is shutting down");
  auto flight = std::make_unique<Inflight>(engine_, aborted_requests_);
  for (size_t i = 0; i < jobs.size(); ++i) {
    try {
      flight->submit(jobs[i]);
    } catch (const InputError& e) {
      throw InputError("prompt " + std::to_string(i) + ": " + e.what());
    }
  }
  return flight;
}

std::optional<Finished> Server::next_sample(Inflight& flight, Clock::time_point deadline) {
  if (stopping_.load()) throw HttpError(503, "server is shutting down");
  if (std::string err = engine_thread_->error(); !err.empty()) {
    throw HttpError(500, "engine failed: " + err);
  }
  const auto now = Clock::now();
  if (now >= deadline) {
    throw HttpError(
        504, "request timed out after " + nlohmann::json(config_.request_timeout_s).dump() + " s");
  }
  return flight.next(
      std::min(kPollInterval, std::chrono::ceil<std::chrono::milliseconds>(deadline - now)));
}

void Server::completions(const httplib::Request& req, httplib::Response& res) {
  if (req.body.size() > config_.max_body_bytes) throw HttpError(413, "request body too large");
  auto st = std::make_shared<RequestState>(inflight_requests_);
  st->completion =
      parse_completion_request(req.body, tok_, engine_.config().max_seq_len, config_.defaults);
  st->deadline = deadline();
  st->flight = submit(st->completion.jobs);
  st->meta = {id_prefix_ + std::to_string(completion_ids_.fetch_add(1)), unix_seconds(),
              st->completion.model.empty() ? config_.model_name : st->completion.model};
  for (const auto& j : st->completion.jobs) st->prompt_tokens += j.prompt_ids.size();

  if (!st->completion.stream) {
    std::vector<Choice> choices;
    while (st->flight->remaining() > 0) {
      if (auto f = next_sample(*st->flight, st->deadline)) {
        choices.push_back(make_choice(f->sample, f->job, st->completion, tok_));
      }
    }
    std::sort(choices.begin(), choices.end(), [](const Choice& a, const Choice& b) {
      return a.json["index"].get<int64_t>() < b.json["index"].get<int64_t>();
    });
    std::vector<nlohmann::json> json;
    for (auto& c : choices) {
      st->completion_tokens += c.completion_tokens;
      json.push_back(std::move(c.json));
    }
    send_json(res, 200,
              completion_response(st->meta, std::move(json),
                                  usage_json(st->prompt_tokens, st->completion_tokens)));
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [this, st](size_t, httplib::DataSink& sink) {
        // httplib checks the socket only when we write; a client that left is noticed here
        // instead, so its work is aborted within one poll interval, not when a sample finishes.
        if (!sink.is_writable()) return false;
        auto event = [](const nlohmann::json& j) { return "data: " + to_text(j) + "\n\n"; };
        std::string out;
        bool end = false;
        try {
          if (auto f = next_sample(*st->flight, st->deadline)) {
            Choice c = make_choice(f->sample, f->job, st->completion, tok_);
            st->completion_tokens += c.completion_tokens;
            out = event(completion_response(st->meta, {std::move(c.json)}, nullptr));
          }
          if (st->flight->remaining() == 0) {
            end = true;
            if (st->completion.include_usage) {
              out += event(completion_response(
                  st->meta, {}, usage_json(st->prompt_tokens, st->completion_tokens)));
            }
          }
        } catch (const HttpError& e) {
          out += event(error_json(e.what(), error_type(e.status)));
          end = true;
        } catch (const std::exception& e) {
          out += event(error_json(e.what(), "server_error"));
          end = true;
        }
        if (end) out += "data: [DONE]\n\n";
        if (!out.empty() && !sink.write(out.data(), out.size())) return false;
        if (end) sink.done();
        return true;
      });
}

void Server::generate(const httplib::Request& req, httplib::Response& res) {
  if (req.body.size() > config_.max_body_bytes) throw HttpError(413, "request body too large");
  auto st = std::make_shared<RequestState>(inflight_requests_);
  GenerateRequest parsed = parse_generate_request(req.body, tok_, config_.defaults);
  st->deadline = deadline();
  st->flight = submit(parsed.jobs);
  st->ids = std::move(parsed.ids);
  res.set_chunked_content_provider(
      "application/x-ndjson", [this, st](size_t, httplib::DataSink& sink) {
        if (!sink.is_writable()) return false;  // the client left (see completions())
        std::string out;
        bool end = false;
        try {
          if (auto f = next_sample(*st->flight, st->deadline)) {
            out = to_text(sample_line(st->ids[f->job], f->sample, tok_)) + "\n";
          }
          end = st->flight->remaining() == 0;
        } catch (const HttpError& e) {
          out += to_text(error_json(e.what(), error_type(e.status))) + "\n";
          end = true;
        } catch (const std::exception& e) {
          out += to_text(error_json(e.what(), "server_error")) + "\n";
          end = true;
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) return false;
        if (end) sink.done();
        return true;
      });
}

void Server::update_weights(const httplib::Request& req, httplib::Response& res) {
  if (req.body.size() > config_.max_weight_bucket_bytes) {
    throw HttpError(
        413, "weight bucket exceeds " + std::to_string(config_.max_weight_bucket_bytes) + " bytes");
  }
  std::lock_guard<std::mutex> lock(weights_mu_);
  const dist::BucketHeader h = dist::read_bucket_header(req.body);
  if (h.version <= weight_version_.load()) {
    throw InputError("weight version " + std::to_string(h.version) +
                     " is not newer than the installed version " +
                     std::to_string(weight_version_.load()));
  }
  // A bucket of a newer version means the sender gave up on the partial one (it restarted or
  // moved on); keeping the old one would block every later update.
  if (assembler_.version() >= 0 && assembler_.version() != h.version) {
    SLOG(kWarn) << "dropping incomplete weight update v" << assembler_.version() << " ("
                << assembler_.buckets_received() << "/" << assembler_.bucket_count()
                << " buckets) for v" << h.version;
    assembler_ = dist::WeightAssembler();
  }
  assembler_.add_bucket(req.body);
  nlohmann::json out = {{"version", h.version},
                        {"complete", assembler_.complete()},
                        {"buckets_received", assembler_.buckets_received()},
                        {"bucket_count", assembler_.bucket_count()}};
  if (assembler_.complete()) {
    std::map<std::string, torch::Tensor> weights;
    try {
      weights = assembler_.take();
    } catch (...) {
      assembler_ = dist::WeightAssembler();
      throw;
    }
    engine_.update_weights(h.version, std::move(weights));
    weight_version_.store(h.version);
    SLOG(kInfo) << "installed weight version " << h.version;
  }
  send_json(res, 200, out);
}

void Server::weights_version(httplib::Response& res) {
  std::lock_guard<std::mutex> lock(weights_mu_);
  nlohmann::json pending = nullptr;
  if (assembler_.version() >= 0) {
    pending = {{"version", assembler_.version()},
               {"buckets_received", assembler_.buckets_received()},
               {"bucket_count", assembler_.bucket_count()}};
  }
  send_json(res, 200, {{"version", weight_version_.load()}, {"pending", pending}});
}

void Server::health(httplib::Response& res) {
  if (std::string err = engine_thread_->error(); !err.empty()) {
    send_json(res, 503,
              {{"status", "error"}, {"error", err}, {"weight_version", weight_version_.load()}});
    return;
  }
  send_json(res, 200,
            {{"status", "ok"},
             {"weight_version", weight_version_.load()},
             {"busy_seconds", engine_.stats().busy_seconds}});
}

void Server::metrics(httplib::Response& res) {
  ServerCounters c;
  c.http_requests = http_requests_.load();
  c.inflight_requests = inflight_requests_.load();
  c.aborted_requests = aborted_requests_.load();
  c.weight_version = weight_version_.load();
  res.set_content(metrics_text(engine_.stats(), c), "text/plain; version=0.0.4");
}

}  // namespace streamrl::server
