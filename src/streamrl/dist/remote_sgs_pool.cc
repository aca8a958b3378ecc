// Least-loaded dispatch over remote SGS instances with re-dispatch on failure (see
// remote_sgs_pool.h).
#include "streamrl/dist/remote_sgs_pool.h"

#include <optional>
#include <random>
#include <thread>

#include "streamrl/core/errors.h"
#include "streamrl/core/log.h"
#include "streamrl/dist/weight_wire.h"

namespace streamrl::dist {
namespace {

RemoteSgsOptions with_run_id(RemoteSgsOptions o) {
  if (o.run_id.empty()) {
    std::random_device rd;
    char buf[24];
    std::snprintf(buf, sizeof buf, "run-%08x%08x", rd(), rd());
    o.run_id = buf;
  }
  return o;
}

}  // namespace

RemoteSgsPool::RemoteSgsPool(const std::vector<std::string>& urls, RemoteSgsOptions options,
                             sgs::SampleSink sink)
    : options_(with_run_id(std::move(options))), sink_(std::move(sink)) {
  if (urls.empty()) throw InputError("remote SGS pool: no instance URLs");
  dead_.assign(urls.size(), false);
  errors_.assign(urls.size(), "");
  for (size_t i = 0; i < urls.size(); ++i) {
    clients_.push_back(std::make_unique<RemoteSgsClient>(
        urls[i], options_, [this, i](FailedRequests f) { on_failure(i, std::move(f)); }));
  }
  if (options_.health_interval_s > 0) watchdog_ = std::thread([this] { watch_health(); });
}

// Every client's streams end before any client goes away: a stream may still call back into the
// pool and re-dispatch to another client.
RemoteSgsPool::~RemoteSgsPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_.store(true);
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  for (auto& c : clients_) c->close();
}

void RemoteSgsPool::mark_dead(size_t instance, const std::string& error) {
  if (!dead_[instance]) SLOG(kWarn) << "SGS instance marked dead: " << error;
  dead_[instance] = true;
  errors_[instance] = error;
}

std::optional<double> RemoteSgsPool::reported_busy_seconds() {
  std::vector<size_t> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < clients_.size(); ++i) {
      if (!dead_[i]) live.push_back(i);
    }
  }
  if (live.empty()) return std::nullopt;
  double total = 0;
  for (size_t i : live) {
    try {
      const double b = clients_[i]->health().busy_seconds;
      if (b < 0) return std::nullopt;
      total += b;
    } catch (const RuntimeFailure& e) {
      // Asking again next iteration would stall the trainer once more: it is dead now.
      fail_instance(i, e.what());
      return std::nullopt;
    }
  }
  return total / static_cast<double>(live.size());
}

double RemoteSgsPool::busy_seconds() {
  if (const auto b = reported_busy_seconds()) return *b;
  std::lock_guard<std::mutex> lock(mu_);
  double wall = busy_total_s_;
  if (outstanding_ > 0) {
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
  }
  return wall;
}

void RemoteSgsPool::fail_instance(size_t instance, const std::string& error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    mark_dead(instance, error);
  }
  clients_[instance]->abort_streams(error);
}

void RemoteSgsPool::watch_health() {
  const auto interval = std::chrono::duration<double>(options_.health_interval_s);
  for (;;) {
    std::vector<size_t> busy;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (wake_.wait_for(lock, interval, [&] { return closing_.load(); })) return;
      for (size_t i = 0; i < clients_.size(); ++i) {
        if (!dead_[i]) busy.push_back(i);
      }
    }
    for (size_t i : busy) {
      if (clients_[i]->outstanding_samples() == 0) continue;
      try {
        clients_[i]->health();
      } catch (const RuntimeFailure& e) {
        fail_instance(i, e.what());
      }
    }
  }
}

void RemoteSgsPool::submit(std::vector<engine::Request> requests) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t samples = 0;
    for (const auto& r : requests) {
      Group& g = groups_[r.request_id];
      g.index_map.resize(r.n);
      for (int i = 0; i < r.n; ++i) g.index_map[i] = i;
      g.remaining = r.n;
      samples += r.n;
    }
    if (outstanding_ == 0 && samples > 0) busy_since_ = std::chrono::steady_clock::now();
    outstanding_ += samples;
  }
  dispatch(std::move(requests));
}

void RemoteSgsPool::dispatch(std::vector<engine::Request> requests) {
  // Least outstanding samples first; each request counts toward its instance as it is placed.
  std::vector<std::vector<engine::Request>> per(clients_.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int64_t> load(clients_.size(), 0);
    bool any = false;
    for (size_t i = 0; i < clients_.size(); ++i) {
      if (!dead_[i]) {
        load[i] = clients_[i]->outstanding_samples();
        any = true;
      }
    }
    if (!any) {
      std::string why;
      for (const auto& e : errors_) why += (why.empty() ? "" : "; ") + e;
      throw RuntimeFailure("no live SGS instance (" + why + ")");
    }
    for (auto& r : requests) {
      size_t best = clients_.size();
      for (size_t i = 0; i < clients_.size(); ++i) {
        if (!dead_[i] && (best == clients_.size() || load[i] < load[best])) best = i;
      }
      load[best] += r.n;
      const int64_t id = r.request_id;
      const int instance = static_cast<int>(best);
      r.on_sample = [this, id, instance](engine::Sample&& s) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          auto it = groups_.find(id);
          if (it == groups_.end()) return;
          s.sample_index = it->second.index_map.at(s.sample_index);
          if (--it->second.remaining == 0) groups_.erase(it);
          if (--outstanding_ == 0) {
            busy_total_s_ +=
                std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_)
                    .count();
          }
        }
        if (sink_) sink_(instance, std::move(s));
      };
      per[best].push_back(std::move(r));
    }
  }
  for (size_t i = 0; i < per.size(); ++i) {
    if (!per[i].empty()) clients_[i]->submit(std::move(per[i]));
  }
}

void RemoteSgsPool::on_failure(size_t instance, FailedRequests failed) {
  if (closing_.load()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!dead_[instance]) mark_dead(instance, failed.error);
    for (size_t k = 0; k < failed.requests.size(); ++k) {
      engine::Request& r = failed.requests[k];
      auto& map = groups_[r.request_id].index_map;
      std::vector<int32_t> next;
      for (int32_t i : failed.missing[k]) next.push_back(map.at(i));
      map = std::move(next);
      // Another seed, so the re-dispatched samples do not repeat the delivered ones.
      r.params.seed = r.params.seed * 6364136223846793005ULL + 1442695040888963407ULL;
    }
  }
  if (failed.requests.empty()) return;
  const auto count = static_cast<int64_t>(failed.requests.size());
  redispatched_.fetch_add(count);
  try {
    dispatch(std::move(failed.requests));
  } catch (const std::exception& e) {
    SLOG(kError) << "could not re-dispatch " << count << " requests: " << e.what();
  }
}

void RemoteSgsPool::update_weights(
    int64_t version, const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  const auto buckets = encode_weight_buckets(version, tensors, options_.max_bucket_bytes);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(clients_.size());
  std::vector<size_t> targets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < clients_.size(); ++i) {
      if (!dead_[i]) targets.push_back(i);
    }
  }
  for (size_t i : targets) {
    threads.emplace_back([&, i] {
      try {
        clients_[i]->push_weight_buckets(buckets);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  size_t installed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i : targets) {
      if (errors[i].empty()) {
        ++installed;
      } else {
        mark_dead(i, errors[i]);
      }
    }
  }
  // A dead instance's streams fail on their own and re-dispatch their requests; one that only
  // rejected the weights finishes what it already accepted, on the old version.
  if (installed == 0) {
    check_alive();
    throw RuntimeFailure("weight version " + std::to_string(version) + " reached no SGS instance");
  }
}

void RemoteSgsPool::check_alive() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string why;
  for (size_t i = 0; i < clients_.size(); ++i) {
    if (!dead_[i]) return;
    why += (why.empty() ? "" : "; ") + errors_[i];
  }
  throw RuntimeFailure("every SGS instance is dead: " + why);
}

std::vector<std::string> RemoteSgsPool::live_urls() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (size_t i = 0; i < clients_.size(); ++i) {
    if (!dead_[i]) out.push_back(clients_[i]->url());
  }
  return out;
}

}  // namespace streamrl::dist
