// The OpenAI endpoints of the SGS HTTP server (routes in http_server.cc): requests run with
// per-token events, each choice's text is released as its tokens settle (CompletionChoices), and a
// stop sequence finishes its sample in the engine at once.
#include <arpa/inet.h>
#include <dirent.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

#include "streamrl/server/http_internal.h"

namespace streamrl::server {
namespace {

// Events handed to one write of a stream at most, so a busy stream still checks its client.
constexpr int kMaxEventsPerWrite = 256;

std::string address_of(const sockaddr_storage& sa) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (sa.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(sa).sin_addr, buf, sizeof buf);
  } else if (sa.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(sa).sin6_addr, buf, sizeof buf);
  }
  return buf;
}

int port_of(const sockaddr_storage& sa) {
  if (sa.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(sa).sin_port);
  if (sa.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(sa).sin6_port);
  return -1;
}

// The socket of the connection a request came in on. httplib hands a plain handler no connection,
// so the socket is found by its two addresses among this process's descriptors; -1 if none.
int socket_of(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(dir)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      continue;
    }
    if (port_of(local) == req.local_port && port_of(peer) == req.remote_port &&
        address_of(peer) == req.remote_addr && address_of(local) == req.local_addr) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

// Whether the client closed its side of the connection (an orderly EOF or a reset). The socket
// stays ours while the handler runs: httplib closes it only after the handler returns.
bool client_gone(int fd) {
  if (fd < 0) return false;
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

std::string sse_event(const nlohmann::json& j) { return "data: " + to_text(j) + "\n\n"; }

}  // namespace

void Server::openai(const httplib::Request& req, httplib::Response& res, bool chat) {
  if (req.body.size() > config_.max_body_bytes) throw HttpError(413, "request body too large");
  auto st = std::make_shared<RequestState>(inflight_requests_);
  const int max_seq_len = engine_.config().max_seq_len;
  st->completion =
      chat ? parse_chat_request(req.body, tok_, config_.chat_encoder, max_seq_len, config_.defaults)
           : parse_completion_request(req.body, tok_, max_seq_len, config_.defaults);
  st->deadline = deadline();
  st->flight = submit(st->completion.jobs, /*tokens=*/true);
  st->meta = {
      (chat ? "chatcmpl-" : "cmpl-") + id_suffix_ + std::to_string(completion_ids_.fetch_add(1)),
      unix_seconds(), st->completion.model.empty() ? config_.model_name : st->completion.model};
  st->choices = std::make_unique<CompletionChoices>(st->completion, tok_);
  for (const auto& j : st->completion.jobs) st->prompt_tokens += j.prompt_ids.size();

  // Applies one event; a choice whose stop sequence matched finishes its sample now.
  auto apply = [](RequestState& s, const InflightEvent& e) {
    CompletionChoices::Update u = s.choices->apply(e);
    if (u.stop_sample) s.flight->stop(e.job, e.sample_index);
    return u;
  };

  if (!st->completion.stream) {
    const int fd = socket_of(req);
    while (st->flight->remaining() > 0) {
      if (client_gone(fd)) {
        // Nobody will read the answer: leaving aborts the work (Inflight's destructor).
        SLOG(kInfo) << "client of " << st->meta.id << " went away; request cancelled";
        return;
      }
      if (auto e = next_sample(*st->flight, st->deadline)) apply(*st, *e);
    }
    send_json(res, 200,
              completion_response(st->completion, st->meta, st->choices->choices(),
                                  usage_json(st->prompt_tokens, st->choices->completion_tokens()),
                                  /*chunk=*/false));
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [this, st, apply](size_t,
                                                                          httplib::DataSink& sink) {
    // httplib checks the socket only when we write; a client that left is noticed here
    // instead, so its work is aborted within one poll interval, not when a sample finishes.
    if (!sink.is_writable()) return false;
    std::string out;
    bool end = false;
    try {
      // Up to one poll interval for the first event, then whatever else is ready.
      auto e = next_sample(*st->flight, st->deadline);
      for (int n = 0; e; e = ++n < kMaxEventsPerWrite ? next_sample(*st->flight, st->deadline,
                                                                    std::chrono::milliseconds(0))
                                                      : std::nullopt) {
        for (auto& c : apply(*st, *e).chunk_choices) {
          out += sse_event(
              completion_response(st->completion, st->meta, {std::move(c)}, nullptr, true));
        }
      }
      if (st->flight->remaining() == 0) {
        end = true;
        if (st->completion.include_usage) {
          out += sse_event(completion_response(
              st->completion, st->meta, {},
              usage_json(st->prompt_tokens, st->choices->completion_tokens()), true));
        }
      }
    } catch (const HttpError& e) {
      out += sse_event(error_json(e.what(), error_type(e.status)));
      end = true;
    } catch (const std::exception& e) {
      out += sse_event(error_json(e.what(), "server_error"));
      end = true;
    }
    if (end) out += "data: [DONE]\n\n";
    if (!out.empty() && !sink.write(out.data(), out.size())) return false;
    if (end) sink.done();
    return true;
  });
}

}  // namespace streamrl::server
