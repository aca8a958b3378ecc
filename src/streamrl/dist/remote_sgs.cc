// Remote SGS client and pool over `streamrl serve`'s native API (see remote_sgs.h).
#include "streamrl/dist/remote_sgs.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>

#include "streamrl/core/errors.h"
#include "streamrl/core/log.h"
#include "streamrl/dist/weight_wire.h"

namespace streamrl::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::string with_scheme(const std::string& url) {
  return url.find("://") == std::string::npos ? "http://" + url : url;
}

void set_timeout(httplib::Client& c, void (httplib::Client::*setter)(time_t, time_t), double s) {
  const auto us = static_cast<int64_t>(s * 1e6);
  (c.*setter)(static_cast<time_t>(us / 1000000), static_cast<time_t>(us % 1000000));
}

engine::FinishReason finish_reason_of(const std::string& s) {
  if (s == "stop") return engine::FinishReason::kStop;
  if (s == "length") return engine::FinishReason::kLength;
  if (s == "aborted") return engine::FinishReason::kAborted;
  throw InputError("unknown finish_reason '" + s + "'");
}

engine::Sample sample_of(const nlohmann::json& j) {
  engine::Sample s;
  s.request_id = j.at("id").get<int64_t>();
  s.sample_index = j.at("sample_index").get<int32_t>();
  s.prompt_ids = j.at("prompt_ids").get<std::vector<int32_t>>();
  s.output_ids = j.at("output_ids").get<std::vector<int32_t>>();
  s.logprobs = j.at("logprobs").get<std::vector<float>>();
  s.finish_reason = finish_reason_of(j.at("finish_reason").get<std::string>());
  s.weight_version = j.at("weight_version").get<int64_t>();
  s.queue_s = j.value("queue_s", 0.0);
  s.prefill_s = j.value("prefill_s", 0.0);
  s.decode_s = j.value("decode_s", 0.0);
  if (j.contains("sampled_mask")) {
    s.sampled_mask = j.at("sampled_mask").get<std::vector<uint8_t>>();
    s.turns = j.value("turns", 1);
    if (s.sampled_mask.size() != s.output_ids.size()) {
      throw InputError("sampled_mask has " + std::to_string(s.sampled_mask.size()) +
                       " entries for " + std::to_string(s.output_ids.size()) + " output tokens");
    }
  }
  return s;
}

nlohmann::json request_json(const engine::Request& r, const RemoteSgsOptions& options) {
  const auto& p = r.params;
  const uint64_t seed = p.seed ^ (static_cast<uint64_t>(r.request_id) * 0x9E3779B97F4A7C15ull +
                                  0x632BE59BD9B4E019ull);
  // ignore_eos: the request's stop ids are the whole list, as for an in-process engine.
  nlohmann::json j = {{"id", r.request_id},
                      {"prompt_ids", r.prompt_ids},
                      {"n", r.n},
                      {"max_new_tokens", p.max_new_tokens},
                      {"temperature", p.temperature},
                      {"top_p", p.top_p},
                      {"top_k", p.top_k},
                      {"seed", seed},
                      {"stop_token_ids", p.stop_token_ids},
                      {"length_estimate", r.length_estimate},
                      {"ignore_eos", true}};
  if (!options.tools.empty()) {
    j["tools"] = options.tools;
    j["max_turns"] = options.max_turns;
  }
  return j;
}

// The message of an {"error": {"message": ...}} body, or the body itself.
std::string error_message(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return j["error"]["message"].get<std::string>();
  }
  return body.substr(0, 200);
}

}  // namespace

RemoteSgsOptions RemoteSgsOptions::read(const core::Config& section) {
  RemoteSgsOptions o;
  section.get("connect_timeout_s", o.connect_timeout_s);
  section.get("stream_idle_timeout_s", o.stream_idle_timeout_s);
  section.get("weight_timeout_s", o.weight_timeout_s);
  section.get("health_timeout_s", o.health_timeout_s);
  section.get("health_interval_s", o.health_interval_s);
  const std::string p = section.prefix().empty() ? "" : section.prefix() + ".";
  for (const auto& [key, v] : {std::pair{"connect_timeout_s", o.connect_timeout_s},
                               {"stream_idle_timeout_s", o.stream_idle_timeout_s},
                               {"weight_timeout_s", o.weight_timeout_s},
                               {"health_timeout_s", o.health_timeout_s}}) {
    if (!(v > 0)) throw InputError("config key '" + p + key + "' must be > 0");
  }
  if (!(o.health_interval_s >= 0)) {
    throw InputError("config key '" + p + "health_interval_s' must be >= 0 (0 = no checks)");
  }
  return o;
}

RemoteSgsClient::RemoteSgsClient(std::string url, RemoteSgsOptions options,
                                 FailureCallback on_failure)
    : url_(with_scheme(url)), options_(options), on_failure_(std::move(on_failure)) {
  if (url.empty()) throw InputError("remote SGS: empty URL");
  if (!make_http(1)->is_valid()) throw InputError("remote SGS: bad URL '" + url + "'");
}

RemoteSgsClient::~RemoteSgsClient() { close(); }

void RemoteSgsClient::close() {
  std::vector<std::unique_ptr<Stream>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_.store(true);
    // Shutting the sockets down is the one thread-safe way to end a blocked read (httplib).
    for (auto& s : streams_) s->http->stop();
    streams = std::move(streams_);
  }
  for (auto& s : streams) {
    if (s->thread.joinable()) s->thread.join();
  }
}

std::unique_ptr<httplib::Client> RemoteSgsClient::make_http(double read_timeout_s) const {
  auto c = std::make_unique<httplib::Client>(url_);
  set_timeout(*c, &httplib::Client::set_connection_timeout, options_.connect_timeout_s);
  set_timeout(*c, &httplib::Client::set_read_timeout, read_timeout_s);
  set_timeout(*c, &httplib::Client::set_write_timeout, read_timeout_s);
  return c;
}

void RemoteSgsClient::submit(std::vector<engine::Request> requests) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_.load()) throw RuntimeFailure("remote SGS " + url_ + ": client is closed");
  for (const auto& r : requests) {
    if (!r.on_sample || r.prompt_ids.empty() || r.n < 1) {
      throw InputError("remote SGS " + url_ + ": request " + std::to_string(r.request_id) +
                       " needs on_sample, a prompt and n >= 1");
    }
    if (pending_.count(r.request_id)) {
      throw InputError("remote SGS " + url_ + ": request id " + std::to_string(r.request_id) +
                       " is already outstanding");
    }
  }
  reap_finished_streams();
  for (size_t begin = 0; begin < requests.size(); begin += options_.max_requests_per_post) {
    const size_t end = std::min(requests.size(), begin + options_.max_requests_per_post);
    auto stream = std::make_unique<Stream>();
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = begin; i < end; ++i) {
      engine::Request& r = requests[i];
      list.push_back(request_json(r, options_));
      stream->ids.push_back(r.request_id);
      Pending p;
      p.delivered.assign(r.n, false);
      p.remaining = r.n;
      p.request = std::move(r);
      pending_.emplace(p.request.request_id, std::move(p));
    }
    stream->http = make_http(options_.stream_idle_timeout_s);
    Stream* raw = stream.get();
    nlohmann::json payload = {{"requests", std::move(list)}};
    if (!options_.run_id.empty()) payload["run_id"] = options_.run_id;
    std::string body = payload.dump();
    streams_.push_back(std::move(stream));
    raw->thread = std::thread(
        [this, raw, body = std::move(body)]() mutable { run_stream(raw, std::move(body)); });
  }
}

void RemoteSgsClient::reap_finished_streams() {
  for (auto it = streams_.begin(); it != streams_.end();) {
    if ((*it)->done) {
      (*it)->thread.join();  // done is set as the thread's last act under mu_
      it = streams_.erase(it);
    } else {
      ++it;
    }
  }
}

void RemoteSgsClient::run_stream(Stream* stream, std::string body) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/generate";
  req.body = std::move(body);
  req.set_header("Content-Type", "application/json");
  std::string buffer, error;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t start = 0;
    for (size_t nl; error.empty() && (nl = buffer.find('\n', start)) != std::string::npos;
         start = nl + 1) {
      if (nl > start) error = handle_line(buffer.substr(start, nl - start));
    }
    buffer.erase(0, start);
    return error.empty() && !closing_.load() && !aborting_.load();
  };
  auto res = stream->http->send(req);
  if (error.empty() && !buffer.empty()) error = handle_line(buffer);  // an unterminated error body
  if (closing_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    stream->done = true;
    return;
  }
  if (aborting_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    error = abort_reason_;
  } else if (error.empty() && !res) {
    error = "connection failed (" + httplib::to_string(res.error()) + ")";
  } else if (error.empty() && res->status != 200) {
    error = "HTTP " + std::to_string(res->status);
    if (!res->body.empty()) error += ": " + error_message(res->body);
  }
  if (!error.empty() && !aborting_.load()) error = "remote SGS " + url_ + ": /generate: " + error;
  fail_stream(stream, error);
}

std::string RemoteSgsClient::handle_line(const std::string& line) {
  const auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "bad response line: " + line.substr(0, 200);
  if (j.contains("error")) return "server error: " + error_message(line);
  engine::Sample s;
  try {
    s = sample_of(j);
  } catch (const std::exception& e) {
    return std::string("bad sample line: ") + e.what();
  }
  if (!options_.run_id.empty() && j.value("run_id", "") != options_.run_id) {
    return "sample of run '" + j.value("run_id", "") + "', not of run '" + options_.run_id + "'";
  }
  if (s.finish_reason == engine::FinishReason::kAborted) return "";  // stays undelivered
  engine::SampleCallback deliver;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(s.request_id);
    if (it == pending_.end() || s.sample_index < 0 ||
        s.sample_index >= static_cast<int32_t>(it->second.delivered.size()) ||
        it->second.delivered[s.sample_index]) {
      return "unexpected sample " + std::to_string(s.sample_index) + " of request " +
             std::to_string(s.request_id);
    }
    Pending& p = it->second;
    p.delivered[s.sample_index] = true;
    deliver = p.request.on_sample;
    if (--p.remaining == 0) pending_.erase(it);
  }
  deliver(std::move(s));
  return "";
}

void RemoteSgsClient::fail_stream(Stream* stream, const std::string& error) {
  FailedRequests failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t id : stream->ids) {
      auto it = pending_.find(id);
      if (it == pending_.end()) continue;
      Pending& p = it->second;
      std::vector<int32_t> missing;
      for (size_t i = 0; i < p.delivered.size(); ++i) {
        if (!p.delivered[i]) missing.push_back(static_cast<int32_t>(i));
      }
      p.request.n = static_cast<int>(missing.size());
      failed.requests.push_back(std::move(p.request));
      failed.missing.push_back(std::move(missing));
      pending_.erase(it);
    }
    if (error.empty() && !failed.requests.empty()) {
      failed.error = "remote SGS " + url_ + ": /generate stream ended with " +
                     std::to_string(failed.requests.size()) + " requests unfinished";
    } else {
      failed.error = error;
    }
    if (!failed.error.empty() && error_.empty()) error_ = failed.error;
  }
  if (!failed.requests.empty() || !failed.error.empty()) {
    SLOG(kWarn) << failed.error << "; " << failed.requests.size() << " requests unfinished";
    failed.url = url_;
    if (on_failure_) on_failure_(std::move(failed));
  }
  std::lock_guard<std::mutex> lock(mu_);
  stream->done = true;
}

void RemoteSgsClient::abort_streams(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  abort_reason_ = why;
  aborting_.store(true);
  for (auto& s : streams_) {
    if (!s->done) s->http->stop();
  }
}

std::vector<int64_t> RemoteSgsClient::unfinished() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> ids;
  for (const auto& [id, p] : pending_) ids.push_back(id);
  return ids;
}

int64_t RemoteSgsClient::outstanding_samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [id, p] : pending_) n += p.remaining;
  return n;
}

std::string RemoteSgsClient::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void RemoteSgsClient::push_weight_buckets(const std::vector<std::string>& buckets) {
  const std::string what = "remote SGS " + url_ + ": weight update";
  httplib::Headers headers;
  if (!options_.run_id.empty()) headers.emplace("X-Streamrl-Run", options_.run_id);
  auto http = make_http(options_.weight_timeout_s);
  for (size_t i = 0; i < buckets.size(); ++i) {
    const auto t0 = Clock::now();
    auto res = http->Post("/update_weights", headers, buckets[i], "application/octet-stream");
    if (!res) {
      const std::string msg = what + " failed at bucket " + std::to_string(i) + " of " +
                              std::to_string(buckets.size()) + " (" +
                              httplib::to_string(res.error()) + ")";
      const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
      if (res.error() == httplib::Error::Read || waited >= options_.weight_timeout_s) {
        throw TimeoutError(msg + ": no answer within " + std::to_string(options_.weight_timeout_s) +
                           " s (sgs.weight_timeout_s)");
      }
      throw RuntimeFailure(msg);
    }
    if (res->status != 200) {
      throw RuntimeFailure(what + " rejected bucket " + std::to_string(i) + ": HTTP " +
                           std::to_string(res->status) + ": " + error_message(res->body));
    }
    if (i + 1 == buckets.size()) {
      const auto j = nlohmann::json::parse(res->body, nullptr, false);
      if (!j.is_object() || !j.value("complete", false)) {
        throw RuntimeFailure(what +
                             ": the instance did not install the weights after the last "
                             "bucket: " +
                             res->body.substr(0, 200));
      }
    }
  }
}

void RemoteSgsClient::update_weights(
    int64_t version, const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  push_weight_buckets(encode_weight_buckets(version, tensors, options_.max_bucket_bytes));
}

RemoteSgsClient::Health RemoteSgsClient::health() {
  auto http = make_http(options_.health_timeout_s);
  auto res = http->Get("/health");
  if (!res) {
    throw RuntimeFailure("remote SGS " + url_ + " is unreachable (" +
                         httplib::to_string(res.error()) + ")");
  }
  const auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (res->status != 200 || !j.is_object() || j.value("status", "") != "ok") {
    throw RuntimeFailure("remote SGS " + url_ + " is unhealthy: HTTP " +
                         std::to_string(res->status) + " " + res->body.substr(0, 200));
  }
  return {j.value("weight_version", int64_t{0}), j.value("busy_seconds", -1.0)};
}

}  // namespace streamrl::dist
