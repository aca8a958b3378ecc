#include "serve_bench.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "streamrl/core/stats.h"
#include "streamrl/core/threads.h"
#include "streamrl/engine/engine.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/model_config.h"
#include "streamrl/server/http_server.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// One streamed completion as a client sees it.
struct Timing {
  double ttft_ms = -1;  // first token's event
  double full_ms = 0;   // the whole response ([DONE])
  int64_t tokens = 0;   // token events
};

Timing stream_completion(int port, int request, int max_tokens) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(600);
  const nlohmann::json body = {{"prompt", "request " + std::to_string(request) + ": "},
                               {"max_tokens", max_tokens},
                               {"temperature", 1},
                               {"seed", request},
                               {"ignore_eos", true},
                               {"stream", true}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  Timing t;
  std::string buffer;
  const auto t0 = Clock::now();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    for (size_t at; (at = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, at + 2)) {
      const std::string event = buffer.substr(0, at);
      if (!event.starts_with("data: {")) continue;
      const auto j = nlohmann::json::parse(event.substr(6), nullptr, false);
      if (!j.is_object() || !j.contains("choices") || j["choices"].empty()) continue;
      if (!j["choices"][0]["finish_reason"].is_null()) continue;
      if (t.ttft_ms < 0) t.ttft_ms = ms_since(t0);
      t.tokens += 1;
    }
    return true;
  };
  auto res = c.send(req);
  if (!res || res->status != 200)
    throw std::runtime_error("serve bench: a streamed request failed");
  t.full_ms = ms_since(t0);
  return t;
}

// `concurrency` clients, each streaming `per_client` completions back to back.
nlohmann::json load(int port, int concurrency, int per_client, int max_tokens) {
  std::mutex mu;
  std::vector<Timing> timings;
  std::vector<std::thread> clients;
  std::atomic<bool> failed{false};
  const auto t0 = Clock::now();
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < per_client; ++i) {
        try {
          Timing t = stream_completion(port, c * per_client + i, max_tokens);
          std::lock_guard<std::mutex> lock(mu);
          timings.push_back(t);
        } catch (const std::exception&) {
          failed.store(true);
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  if (failed.load()) throw std::runtime_error("serve bench: a streamed request failed");
  const double wall_s = ms_since(t0) / 1000;
  std::vector<double> ttft, full;
  int64_t tokens = 0;
  for (const auto& t : timings) {
    ttft.push_back(t.ttft_ms);
    full.push_back(t.full_ms);
    tokens += t.tokens;
  }
  return {{"requests", timings.size()},
          {"requests_per_s", timings.size() / wall_s},
          {"output_tokens_per_s", tokens / wall_s},
          {"ttft_p50_ms", core::percentile(ttft, 0.5)},
          {"ttft_p90_ms", core::percentile(ttft, 0.9)},
          {"full_response_p50_ms", core::percentile(full, 0.5)},
          {"full_response_p90_ms", core::percentile(full, 0.9)}};
}

// /health latencies (ms), polled every `interval` until `done`.
std::vector<double> poll_health(int port, const std::atomic<bool>& done,
                                std::chrono::milliseconds interval) {
  std::vector<double> out;
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30);
  while (!done.load()) {
    const auto t0 = Clock::now();
    auto res = c.Get("/health");
    if (res && res->status == 200) out.push_back(ms_since(t0));
    std::this_thread::sleep_for(interval);
  }
  return out;
}

}  // namespace

nlohmann::json run_serve_bench(const BenchOptions& options) {
  const int threads = options.threads > 0 ? options.threads : core::available_cores();
  std::unique_ptr<tokenizer::Tokenizer> tok;
  model::CausalLM lm(nullptr);
  if (options.ckpt.empty()) {
    lm = model::CausalLM(
        model::load_model_config(std::string(STREAMRL_SOURCE_DIR) + "/configs/model/tiny.json"), 0);
    tok = tokenizer::make_tokenizer("char");
  } else {
    lm = model::load_model(options.ckpt);
    tok = tokenizer::load_tokenizer(options.ckpt);
  }
  engine::EngineConfig ec;
  ec.max_batch_size = 64;
  ec.max_seq_len = 512;
  engine::Engine engine(std::move(lm), ec);
  server::ServerConfig sc;
  sc.threads = threads;
  server::Server srv(engine, *tok, sc);
  const int port = srv.port();

  const int max_tokens = options.quick ? 32 : 128;
  const int per_client = options.quick ? 2 : 4;
  nlohmann::json by_concurrency = nlohmann::json::object();
  for (int c : {1, 8, 32}) {
    by_concurrency[std::to_string(c)] =
        load(port, c, c == 1 ? 2 * per_client : per_client, max_tokens);
  }
  // Health while 32 requests stream: one more load at 32, polled throughout.
  std::atomic<bool> done{false};
  std::vector<double> health;
  std::thread poller([&] { health = poll_health(port, done, std::chrono::milliseconds(20)); });
  const nlohmann::json under_load = load(port, 32, per_client, max_tokens);
  done.store(true);
  poller.join();
  srv.stop();
  return {{"threads", threads},
          {"max_tokens", max_tokens},
          {"concurrency", by_concurrency},
          {"health_samples", health.size()},
          {"health_p50_ms", health.empty() ? -1.0 : core::percentile(health, 0.5)},
          {"health_p99_ms", health.empty() ? -1.0 : core::percentile(health, 0.99)},
          {"health_max_ms", health.empty() ? -1.0 : core::percentile(health, 1.0)},
          {"under_health_polling", under_load},
          {"goal_health_p99_ms", 100}};
}

}  // namespace streamrl::bench
