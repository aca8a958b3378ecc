// Routing, /generate, weights, health and lifetime of the SGS HTTP server (see http_server.h;
// the OpenAI endpoints are in http_server_openai.cc). Routes:
//   POST /v1/completions       OpenAI text completions (openai_api.h); "stream": true sends
//   POST /v1/chat/completions  server-sent events, one per token of a choice (text that may begin
//                              a stop sequence waits until it cannot), then "data: [DONE]". A
//                              client that leaves (streaming or not) has its work aborted.
//   GET  /v1/models            the served model
//   POST /generate        native batch (native_api.h); the response is chunked NDJSON, one line per
//                         finished sample in completion order, and an empty line after each second
//                         without one (so a client notices a frozen server by silence); a failure
//                         after the first byte ends the stream with an {"error": ...} line. A
//                         request naming a "run_id" gets 409 when another run's weights are
//                         installed (the checkpoint's own serve any run), and its stream ends with
//                         an error line if another run's weights arrive while it runs.
//   POST /update_weights  one weight_wire bucket -> {version, run_id, complete, buckets_received,
//                         bucket_count}; the last bucket of a version installs it. Header
//                         X-Streamrl-Run names the sender's run: versions only need to increase
//                         within one run, and another run's weights replace the installed ones.
//   GET  /weights/version {version, run_id, pending: null | {version, run_id, buckets_received,
//                         bucket_count}}
//   GET  /health          {status: "ok", weight_version, run_id, busy_seconds, engine_failures,
//                         last_engine_failure} (503 once the engine thread stopped). A step that
//                         throws aborts the requests in the engine (500) and the engine serves on
//                         with the last good weights; engine_failures counts such steps.
//   GET  /metrics         Prometheus text (metrics_text.h)
// Health and metrics read atomics and short-held locks only, and the connection threads far
// outnumber the streams an engine can serve (ServerConfig::http_threads), so they answer while
// generations stream.
// Errors are {"error": {message, type, param, code}}: 400 bad JSON or parameters, 404 unknown
// route, 405 wrong method, 409 another run's weights, 413 body or request too large, 500 engine
// failure, 503 stopping, 504 timeout.
#include "streamrl/server/http_server.h"
#include "streamrl/server/http_internal.h"

#include <httplib.h>
#include <sys/socket.h>

#include <map>
#include <random>

#include "streamrl/core/errors.h"
#include "streamrl/core/log.h"
#include "streamrl/core/threads.h"
#include "streamrl/server/metrics_text.h"
#include "streamrl/server/native_api.h"
#include "streamrl/server/openai_api.h"

namespace streamrl::server {
namespace {

// The longest a /generate stream stays silent: an empty line is sent after this much quiet.
constexpr std::chrono::seconds kKeepaliveInterval{1};

// The method a route takes, or nullptr for a path that is no route.
const char* allowed_method(const std::string& path) {
  static const std::map<std::string, const char*> kRoutes = {
      {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
      {"/v1/models", "GET"},       {"/generate", "POST"},
      {"/update_weights", "POST"}, {"/weights/version", "GET"},
      {"/health", "GET"},          {"/metrics", "GET"}};
  auto it = kRoutes.find(path);
  return it == kRoutes.end() ? nullptr : it->second;
}

std::string random_hex() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

}  // namespace

Server::Server(engine::Engine& engine, const tokenizer::Tokenizer& tok, ServerConfig config)
    : engine_(engine),
      tok_(tok),
      config_(std::move(config)),
      id_suffix_(random_hex() + "-"),
      started_(unix_seconds()),
      weight_version_(engine.stats().weight_version) {
  http_ = std::make_unique<httplib::Server>();
  http_->new_task_queue = [n = config_.http_threads] {
    return new httplib::ThreadPool(static_cast<size_t>(n));
  };
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
      engine_, [threads] { core::apply_core_budget(threads); }, engine::OnEngineFailure::kRecover);
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
        if (const char* allowed = allowed_method(req.path); res.status == 404 && allowed) {
          res.status = 405;
          res.set_header("Allow", allowed);
          message =
              "method " + req.method + " is not allowed for " + req.path + " (use " + allowed + ")";
        }
        if (res.status == 413) message = "request body too large";
        send_error(res, res.status, message);
        return httplib::Server::HandlerResponse::Handled;
      }));
  http_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        guarded(res, [&] { std::rethrow_exception(ep); });
      });
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { openai(req, res, /*chat=*/false); });
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { openai(req, res, /*chat=*/true); });
  });
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      send_json(res, 200, models_json(config_.model_name, started_, engine_.config().max_seq_len));
    });
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

std::unique_ptr<Inflight> Server::submit(const std::vector<PromptJob>& jobs, bool per_token) {
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
      flight->submit(jobs[i], per_token);
    } catch (const InputError& e) {
      throw InputError("prompt " + std::to_string(i) + ": " + e.what());
    }
  }
  return flight;
}

std::optional<InflightEvent> Server::next_sample(Inflight& flight, Clock::time_point deadline,
                                                 std::chrono::milliseconds wait) {
  if (stopping_.load()) throw HttpError(503, "server is shutting down");
  if (std::string err = engine_thread_->error(); !err.empty()) {
    throw HttpError(500, "engine failed: " + err);
  }
  const auto now = Clock::now();
  if (now >= deadline) {
    throw HttpError(
        504, "request timed out after " + nlohmann::json(config_.request_timeout_s).dump() + " s");
  }
  auto f =
      flight.next(std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(deadline - now)));
  // Only Inflight's destructor aborts on our behalf, so an aborted sample here was dropped by an
  // engine step that failed (and recovered).
  if (f && f->sample && f->sample->finish_reason == engine::FinishReason::kAborted) {
    throw HttpError(500, "engine step failed (request aborted, engine recovered): " +
                             engine_thread_->last_failure());
  }
  return f;
}

void Server::generate(const httplib::Request& req, httplib::Response& res) {
  if (req.body.size() > config_.max_body_bytes) throw HttpError(413, "request body too large");
  auto st = std::make_shared<RequestState>(inflight_requests_);
  GenerateRequest parsed = parse_generate_request(req.body, tok_, config_.defaults);
  st->run_id = parsed.run_id;
  st->run_changes = run_changes_.load();
  // The checkpoint's own weights (run "") serve anyone; a run's weights serve that run only.
  if (const std::string run = installed_run();
      !st->run_id.empty() && !run.empty() && st->run_id != run) {
    throw HttpError(409, "this instance holds the weights of run '" + run + "', not of run '" +
                             st->run_id + "': push that run's weights first");
  }
  st->deadline = deadline();
  st->flight = submit(parsed.jobs);
  st->ids = std::move(parsed.ids);
  st->last_write = Clock::now();
  res.set_chunked_content_provider(
      "application/x-ndjson", [this, st](size_t, httplib::DataSink& sink) {
        // httplib checks the socket only when we write; a client that left is noticed here
        // instead, so its work is aborted within one poll interval, not when a sample finishes.
        if (!sink.is_writable()) return false;
        std::string out;
        bool end = false;
        try {
          if (auto f = next_sample(*st->flight, st->deadline)) {
            if (!st->run_id.empty() && run_changes_.load() != st->run_changes &&
                installed_run() != st->run_id) {
              throw HttpError(409, "the weights of another run were installed while run '" +
                                       st->run_id + "' was generating");
            }
            nlohmann::json line = sample_line(st->ids[f->job], *f->sample, tok_);
            if (!st->run_id.empty()) line["run_id"] = st->run_id;
            out = to_text(line) + "\n";
          } else if (Clock::now() - st->last_write >= kKeepaliveInterval) {
            out = "\n";
          }
          end = st->flight->remaining() == 0;
        } catch (const HttpError& e) {
          out += to_text(error_json(e.what(), error_type(e.status))) + "\n";
          end = true;
        } catch (const std::exception& e) {
          out += to_text(error_json(e.what(), "server_error")) + "\n";
          end = true;
        }
        if (!out.empty()) {
          if (!sink.write(out.data(), out.size())) return false;
          st->last_write = Clock::now();
        }
        if (end) sink.done();
        return true;
      });
}

void Server::update_weights(const httplib::Request& req, httplib::Response& res) {
  if (req.body.size() > config_.max_weight_bucket_bytes) {
    throw HttpError(
        413, "weight bucket exceeds " + std::to_string(config_.max_weight_bucket_bytes) + " bytes");
  }
  const std::string run = req.get_header_value("X-Streamrl-Run");
  std::lock_guard<std::mutex> lock(weights_mu_);
  const dist::BucketHeader h = dist::read_bucket_header(req.body);
  const std::string installed = installed_run();
  // Versions order the updates of one run; a run that is not the installed one (a new job, or a
  // resumed one, against a long-lived instance) starts its own sequence.
  if (run == installed && h.version <= weight_version_.load()) {
    throw InputError("weight version " + std::to_string(h.version) +
                     " is not newer than the installed version " +
                     std::to_string(weight_version_.load()) + " of run '" + run + "'");
  }
  // A bucket of another version or run means the sender gave up on the partial one (it restarted
  // or moved on); keeping the old one would block every later update.
  if (assembler_.version() >= 0 && (assembler_.version() != h.version || assembler_run_ != run)) {
    SLOG(kWarn) << "dropping incomplete weight update v" << assembler_.version() << " of run '"
                << assembler_run_ << "' (" << assembler_.buckets_received() << "/"
                << assembler_.bucket_count() << " buckets) for v" << h.version << " of run '" << run
                << "'";
    assembler_ = dist::WeightAssembler();
  }
  assembler_.add_bucket(req.body);
  assembler_run_ = run;
  nlohmann::json out = {{"version", h.version},
                        {"run_id", run},
                        {"complete", assembler_.complete()},
                        {"buckets_received", assembler_.buckets_received()},
                        {"bucket_count", assembler_.bucket_count()}};
  if (assembler_.complete()) {
    std::map<std::string, torch::Tensor> weights;
    try {
      weights = assembler_.take();
      // Every tensor is checked here; a rejected update leaves the installed weights serving.
      engine_.update_weights(h.version, std::move(weights));
    } catch (...) {
      assembler_ = dist::WeightAssembler();
      throw;
    }
    if (run != installed) {
      std::lock_guard<std::mutex> run_lock(run_mu_);
      installed_run_ = run;
      run_changes_.fetch_add(1);
    }
    weight_version_.store(h.version);
    SLOG(kInfo) << "installed weight version " << h.version << " of run '" << run << "'";
  }
  send_json(res, 200, out);
}

std::string Server::installed_run() const {
  std::lock_guard<std::mutex> lock(run_mu_);
  return installed_run_;
}

void Server::weights_version(httplib::Response& res) {
  std::lock_guard<std::mutex> lock(weights_mu_);
  nlohmann::json pending = nullptr;
  if (assembler_.version() >= 0) {
    pending = {{"version", assembler_.version()},
               {"run_id", assembler_run_},
               {"buckets_received", assembler_.buckets_received()},
               {"bucket_count", assembler_.bucket_count()}};
  }
  send_json(
      res, 200,
      {{"version", weight_version_.load()}, {"run_id", installed_run()}, {"pending", pending}});
}

void Server::health(httplib::Response& res) {
  // Atomics and short locks only: never behind a generation or a weight update.
  nlohmann::json body = {{"status", "ok"},
                         {"weight_version", weight_version_.load()},
                         {"run_id", installed_run()},
                         {"busy_seconds", engine_.stats().busy_seconds},
                         {"engine_failures", engine_thread_->failures()},
                         {"last_engine_failure", engine_thread_->last_failure()}};
  if (std::string err = engine_thread_->error(); !err.empty()) {
    body["status"] = "error";
    body["error"] = err;
    send_json(res, 503, body);
    return;
  }
  send_json(res, 200, body);
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
