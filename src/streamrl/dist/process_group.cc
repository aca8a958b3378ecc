// c10d Gloo process group over a TCPStore rendezvous (see process_group.h).

// Debian's libtorch is built with Gloo (libtorch_cpu links libgloo and exports ProcessGroupGloo)
// but its CMake config does not export the macro that unlocks the header.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include "streamrl/dist/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "streamrl/core/errors.h"

namespace streamrl::dist {
namespace {

// The first line of a c10d/Gloo message; the rest is a C++ backtrace.
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

bool looks_like_timeout(const std::string& msg) {
  return msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos;
}

int env_int(const char* name, int fallback, bool required) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    if (required) throw InputError(std::string("environment variable ") + name + " is not set");
    return fallback;
  }
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 30)) {
    throw InputError(std::string("environment variable ") + name + "='" + v +
                     "' is not a non-negative integer");
  }
  return static_cast<int>(x);
}

std::string seconds(std::chrono::milliseconds t) {
  std::ostringstream out;
  out << static_cast<double>(t.count()) / 1000.0 << " s";
  return out.str();
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// The address of this host's interface that routes to `addr`: a UDP socket "connected" there sends
// nothing but gets the source address the kernel would use. Gloo must bind that interface on
// every rank; the hostname's address (Gloo's default) may be loopback or absent on a multi-homed
// host or inside a container. "" when `addr` does not resolve.
std::string local_address_towards(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return "";
  std::string out;
  for (addrinfo* a = res; a != nullptr && out.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {0};
      const void* src =
          local.ss_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, src, text, sizeof(text)) != nullptr) out = text;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

}  // namespace

ProcessGroupOptions process_group_options_from_env(std::chrono::milliseconds timeout) {
  ProcessGroupOptions o;
  o.timeout = timeout;
  const bool distributed = std::getenv("WORLD_SIZE") != nullptr || std::getenv("RANK") != nullptr;
  o.world_size = env_int("WORLD_SIZE", 1, distributed);
  o.rank = env_int("RANK", 0, distributed);
  o.local_rank = env_int("LOCAL_RANK", o.rank, false);
  if (o.world_size < 1) throw InputError("WORLD_SIZE must be at least 1");
  if (o.rank >= o.world_size) {
    throw InputError("RANK=" + std::to_string(o.rank) +
                     " is not below WORLD_SIZE=" + std::to_string(o.world_size));
  }
  if (o.world_size > 1) {
    const char* addr = std::getenv("MASTER_ADDR");
    if (addr == nullptr || *addr == '\0')
      throw InputError("environment variable MASTER_ADDR is not set");
    o.master_addr = addr;
    o.master_port = env_int("MASTER_PORT", 0, true);
    if (o.master_port < 1 || o.master_port > 65535) {
      throw InputError("MASTER_PORT=" + std::to_string(o.master_port) + " is not a port");
    }
  }
  return o;
}

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> gloo;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
};

ProcessGroup::ProcessGroup(const ProcessGroupOptions& options, std::unique_ptr<Impl> impl)
    : options_(options), impl_(std::move(impl)) {}

ProcessGroup::ProcessGroup(const ProcessGroupOptions& options) : options_(options) {
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size) {
    throw InputError("process group: rank " + std::to_string(options_.rank) +
                     " is outside a world of " + std::to_string(options_.world_size));
  }
  if (options_.world_size == 1) return;
  impl_ = std::make_unique<Impl>();
  const std::string where = "process group rendezvous at " + options_.master_addr + ":" +
                            std::to_string(options_.master_port) + " (rank " +
                            std::to_string(options_.rank) + " of " +
                            std::to_string(options_.world_size) + ")";
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(options_.master_port);
    so.isServer = options_.rank == 0;
    so.numWorkers = options_.world_size;
    so.waitWorkers = true;
    so.timeout = options_.timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(options_.master_addr, so);

    auto go = c10d::ProcessGroupGloo::Options::create(options_.timeout);
    // Ranks on one machine talk over loopback; across machines over the interface that routes
    // to MASTER_ADDR, or the one GLOO_SOCKET_IFNAME names (as in PyTorch).
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
      go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (is_loopback(options_.master_addr)) {
      go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      const std::string local = local_address_towards(options_.master_addr, options_.master_port);
      if (local.empty())
        throw RuntimeFailure("MASTER_ADDR " + options_.master_addr + " does not resolve");
      go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(local));
    }
    go->threads = 1;  // collectives are issued one at a time from the trainer thread
    impl_->gloo = go;
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, options_.rank,
                                                            options_.world_size, go);
  } catch (const std::exception& e) {
    const std::string msg =
        where + " failed (timeout " + seconds(options_.timeout) + "): " + first_line(e.what());
    if (looks_like_timeout(e.what())) throw TimeoutError(msg);
    throw RuntimeFailure(msg);
  }
}

struct ProcessGroup::PendingSend {
  c10::intrusive_ptr<c10d::Work> work;
  std::vector<torch::Tensor> buffer;  // alive until the peer has it
  std::string what;
};

ProcessGroup::~ProcessGroup() {
  // Sends still in flight hold buffers Gloo writes from: let them finish or fail first.
  try {
    wait_sends();
  } catch (const std::exception&) {
  }
}

namespace {

// Waits for `work`, adds the time to `seconds_total`, and turns a Gloo failure into one clear
// line.
void wait_for(const c10::intrusive_ptr<c10d::Work>& work, const std::string& op,
              const ProcessGroupOptions& o, double& seconds_total) {
  const auto start = std::chrono::steady_clock::now();
  try {
    // The explicit bound: a point-to-point recv whose peer died before sending has no other.
    work->wait(o.timeout);
    seconds_total +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } catch (const std::exception& e) {
    const std::string msg = "process group rank " + std::to_string(o.rank) + " of " +
                            std::to_string(o.world_size) + ": " + op +
                            " failed (a peer died or did not answer within " + seconds(o.timeout) +
                            "): " + first_line(e.what());
    if (looks_like_timeout(e.what())) throw TimeoutError(msg);
    throw RuntimeFailure(msg);
  }
}

// Runs `collective` on one flat host buffer per dtype and copies the result back into `tensors`
// (on any device), so one exchange carries many small tensors (as DDP's buckets do).
template <typename F>
void flat_exchange(std::vector<torch::Tensor>& tensors, F&& collective) {
  torch::NoGradGuard no_grad;
  std::map<c10::ScalarType, std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) {
      throw InputError("process group: tensor " + std::to_string(i) + " is undefined");
    }
    groups[tensors[i].scalar_type()].push_back(i);
  }
  for (const auto& [dtype, idx] : groups) {
    std::vector<torch::Tensor> parts;
    for (size_t i : idx) parts.push_back(tensors[i].detach().reshape({-1}));
    // Gloo reduces host memory: device tensors are staged through it (one copy each way).
    std::vector<torch::Tensor> buf = {torch::cat(parts).cpu()};
    collective(buf);
    int64_t offset = 0;
    for (size_t i : idx) {
      const int64_t n = tensors[i].numel();
      tensors[i].detach().copy_(buf[0].narrow(0, offset, n).view(tensors[i].sizes()));
      offset += n;
    }
  }
}

}  // namespace

void ProcessGroup::all_reduce_sum(std::vector<torch::Tensor>& tensors, int64_t chunk_bytes) {
  if (!impl_) return;
  flat_exchange(tensors, [&](std::vector<torch::Tensor>& buf) {
    const int64_t n = buf[0].numel();
    const int64_t chunk =
        chunk_bytes > 0 ? std::max<int64_t>(1, chunk_bytes / buf[0].element_size()) : n;
    for (int64_t begin = 0; begin < n; begin += chunk) {
      std::vector<torch::Tensor> part = {buf[0].narrow(0, begin, std::min(chunk, n - begin))};
      wait_for(impl_->pg->allreduce(part), "all_reduce", options_, collective_seconds_);
    }
  });
}

std::vector<double> ProcessGroup::all_reduce_sum(const std::vector<double>& values) {
  if (!impl_ || values.empty()) return values;
  std::vector<torch::Tensor> buf = {
      torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble))};
  wait_for(impl_->pg->allreduce(buf), "all_reduce of scalars", options_, collective_seconds_);
  const double* p = buf[0].data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

void ProcessGroup::broadcast_from_rank0(std::vector<torch::Tensor>& tensors) {
  if (!impl_) return;
  flat_exchange(tensors, [&](std::vector<torch::Tensor>& buf) {
    c10d::BroadcastOptions bo;
    bo.rootRank = 0;
    wait_for(impl_->pg->broadcast(buf, bo), "broadcast", options_, collective_seconds_);
  });
}

std::string ProcessGroup::broadcast_bytes_from_rank0(const std::string& bytes) {
  if (!impl_) return bytes;
  std::vector<torch::Tensor> size = {torch::tensor({static_cast<int64_t>(bytes.size())})};
  c10d::BroadcastOptions bo;
  bo.rootRank = 0;
  wait_for(impl_->pg->broadcast(size, bo), "broadcast of a size", options_, collective_seconds_);
  const int64_t n = size[0].item<int64_t>();
  std::vector<torch::Tensor> buf = {torch::empty({n}, torch::kUInt8)};
  if (options_.rank == 0 && n > 0) std::memcpy(buf[0].data_ptr(), bytes.data(), n);
  wait_for(impl_->pg->broadcast(buf, bo), "broadcast of bytes", options_, collective_seconds_);
  return std::string(static_cast<const char*>(buf[0].data_ptr()), n);
}

std::vector<std::string> ProcessGroup::all_gather_bytes(const std::string& bytes) {
  if (!impl_) return {bytes};
  std::vector<double> sizes(options_.world_size, 0.0);
  sizes[options_.rank] = static_cast<double>(bytes.size());
  sizes = all_reduce_sum(sizes);
  int64_t longest = 0;
  for (double s : sizes) longest = std::max(longest, static_cast<int64_t>(s));
  std::vector<torch::Tensor> in = {torch::zeros({longest}, torch::kUInt8)};
  if (!bytes.empty()) std::memcpy(in[0].data_ptr(), bytes.data(), bytes.size());
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < options_.world_size; ++r)
    out[0].push_back(torch::empty({longest}, torch::kUInt8));
  wait_for(impl_->pg->allgather(out, in), "all_gather of bytes", options_, collective_seconds_);
  std::vector<std::string> all;
  for (int r = 0; r < options_.world_size; ++r) {
    all.emplace_back(static_cast<const char*>(out[0][r].data_ptr()), static_cast<size_t>(sizes[r]));
  }
  return all;
}

namespace {

// An exchange already done (a world of one): its rows.
class DoneAllToAll : public ProcessGroup::PendingAllToAll {
 public:
  explicit DoneAllToAll(torch::Tensor out) : out_(std::move(out)) {}
  torch::Tensor wait() override { return out_; }
  torch::Tensor output() const override { return out_; }

 private:
  torch::Tensor out_;
};

}  // namespace

class GlooAllToAll : public ProcessGroup::PendingAllToAll {
 public:
  GlooAllToAll(c10::intrusive_ptr<c10d::Work> work, torch::Tensor out,
               const ProcessGroupOptions& options, double& seconds)
      : work_(std::move(work)), out_(std::move(out)), options_(options), seconds_(seconds) {}
  torch::Tensor wait() override {
    if (work_) wait_for(std::exchange(work_, {}), "all_to_all", options_, seconds_);
    return out_;
  }
  torch::Tensor output() const override { return out_; }

 private:
  c10::intrusive_ptr<c10d::Work> work_;  // holds `out_` and the input until Gloo is done
  torch::Tensor out_;
  const ProcessGroupOptions& options_;
  double& seconds_;
};

torch::Tensor ProcessGroup::all_to_all(const torch::Tensor& x, const std::vector<int64_t>& send,
                                       const std::vector<int64_t>& recv) {
  return all_to_all_start(x, send, recv)->wait();
}

std::unique_ptr<ProcessGroup::PendingAllToAll> ProcessGroup::all_to_all_start(
    const torch::Tensor& x, const std::vector<int64_t>& send, const std::vector<int64_t>& recv) {
  const auto total = [](const std::vector<int64_t>& v) {
    int64_t s = 0;
    for (int64_t n : v) s += n;
    return s;
  };
  if (static_cast<int>(send.size()) != options_.world_size ||
      static_cast<int>(recv.size()) != options_.world_size || x.dim() < 1 ||
      total(send) != x.size(0) || !x.device().is_cpu()) {
    throw InputError("process group all_to_all: splits of " + std::to_string(send.size()) + "/" +
                     std::to_string(recv.size()) + " ranks for a world of " +
                     std::to_string(options_.world_size) + " and a CPU tensor of " +
                     std::to_string(x.dim() < 1 ? 0 : x.size(0)) + " rows");
  }
  torch::NoGradGuard no_grad;
  if (!impl_) return std::make_unique<DoneAllToAll>(x.detach().clone());
  std::vector<int64_t> shape = x.sizes().vec();
  shape[0] = total(recv);
  torch::Tensor out = torch::empty(shape, x.options());
  torch::Tensor in = x.detach().contiguous();
  std::vector<int64_t> out_splits = recv, in_splits = send;
  return std::make_unique<GlooAllToAll>(impl_->pg->alltoall_base(out, in, out_splits, in_splits),
                                        out, options_, collective_seconds_);
}

std::unique_ptr<ProcessGroup> ProcessGroup::subgroup(const std::vector<int>& ranks,
                                                     const std::string& name,
                                                     std::chrono::milliseconds timeout) {
  const auto me = std::find(ranks.begin(), ranks.end(), options_.rank);
  if (me == ranks.end() || !std::is_sorted(ranks.begin(), ranks.end()) ||
      ranks.back() >= options_.world_size) {
    throw InputError("process group " + name + ": rank " + std::to_string(options_.rank) +
                     " builds a subgroup it is not in, or of ranks outside the world");
  }
  ProcessGroupOptions o = options_;
  o.rank = static_cast<int>(me - ranks.begin());
  o.world_size = static_cast<int>(ranks.size());
  if (timeout.count() > 0) o.timeout = timeout;
  if (o.world_size == 1 || !impl_)
    return std::unique_ptr<ProcessGroup>(new ProcessGroup(o, nullptr));
  auto impl = std::make_unique<Impl>();
  impl->store = c10::make_intrusive<c10d::PrefixStore>(name, impl_->store);
  impl->gloo = impl_->gloo;
  if (o.timeout != options_.timeout) {  // Gloo bounds its own waits by the options' timeout
    impl->gloo = c10d::ProcessGroupGloo::Options::create(o.timeout);
    impl->gloo->devices = impl_->gloo->devices;
    impl->gloo->threads = impl_->gloo->threads;
  }
  try {
    impl->pg =
        c10::make_intrusive<c10d::ProcessGroupGloo>(impl->store, o.rank, o.world_size, impl->gloo);
  } catch (const std::exception& e) {
    const std::string msg = "process group " + name + " (rank " + std::to_string(o.rank) + " of " +
                            std::to_string(o.world_size) + ") failed: " + first_line(e.what());
    if (looks_like_timeout(e.what())) throw TimeoutError(msg);
    throw RuntimeFailure(msg);
  }
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(o, std::move(impl)));
}

void ProcessGroup::send(const torch::Tensor& tensor, int dst, int tag) {
  if (dst < 0 || dst >= options_.world_size || dst == options_.rank) {
    throw InputError("process group send: rank " + std::to_string(options_.rank) +
                     " cannot send to rank " + std::to_string(dst) + " of " +
                     std::to_string(options_.world_size));
  }
  PendingSend p;
  p.buffer = {tensor.detach().to(torch::kCPU).contiguous()};  // the caller does not write to it
  p.what = "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")";
  p.work = impl_->pg->send(p.buffer, dst, tag);
  sends_.push_back(std::move(p));
  // Completed sends release their buffers.
  std::erase_if(sends_, [](const PendingSend& s) { return s.work->isCompleted(); });
}

torch::Tensor ProcessGroup::recv(at::IntArrayRef shape, const torch::TensorOptions& options,
                                 int src, int tag) {
  if (src < 0 || src >= options_.world_size || src == options_.rank) {
    throw InputError("process group recv: rank " + std::to_string(options_.rank) +
                     " cannot receive from rank " + std::to_string(src) + " of " +
                     std::to_string(options_.world_size));
  }
  std::vector<torch::Tensor> buf = {
      torch::empty(shape, torch::TensorOptions().dtype(options.dtype()))};
  wait_for(impl_->pg->recv(buf, src, tag),
           "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")", options_,
           collective_seconds_);
  return buf[0].to(options.device());
}

void ProcessGroup::wait_sends() {
  std::vector<PendingSend> pending = std::move(sends_);
  sends_.clear();
  for (PendingSend& p : pending) wait_for(p.work, p.what, options_, collective_seconds_);
}

void ProcessGroup::barrier() {
  if (!impl_) return;
  wait_for(impl_->pg->barrier(), "barrier", options_, collective_seconds_);
}

void all_reduce_gradients(ProcessGroup& group, const std::vector<torch::Tensor>& parameters,
                          int64_t chunk_bytes) {
  if (group.world_size() == 1) return;
  // Which parameters have a gradient on some rank: those are exchanged (zeros where a rank has
  // none, e.g. it had no trainable sample); the rest keep no gradient, as with one process, so
  // the optimizer skips them alike.
  std::vector<double> has_grad;
  for (const auto& p : parameters) has_grad.push_back(p.grad().defined() ? 1.0 : 0.0);
  has_grad = group.all_reduce_sum(has_grad);
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (has_grad[i] == 0) continue;
    torch::Tensor p = parameters[i];
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  group.all_reduce_sum(grads, chunk_bytes);
}

void check_same_on_every_rank(ProcessGroup& group, const std::vector<torch::Tensor>& tensors,
                              const std::string& what) {
  if (group.world_size() == 1) return;
  torch::NoGradGuard no_grad;
  // Sums and sums of squares weighted by position, so a swap or a sign change shows too.
  double sum = 0, squares = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const torch::Tensor t = tensors[i].detach().to(torch::kDouble);
    sum += (i + 1) * t.sum().item<double>();
    squares += (i + 1) * t.square().sum().item<double>();
  }
  std::vector<torch::Tensor> rank0 = {torch::tensor({sum, squares}, torch::kDouble)};
  group.broadcast_from_rank0(rank0);
  const double s0 = rank0[0][0].item<double>(), q0 = rank0[0][1].item<double>();
  const auto differs = [](double a, double b) {
    return std::abs(a - b) > 1e-6 * std::max({1.0, std::abs(a), std::abs(b)});
  };
  const double mine = differs(sum, s0) || differs(squares, q0) ? 1.0 : 0.0;
  const double ranks_off = group.all_reduce_sum(std::vector<double>{mine})[0];
  if (ranks_off > 0) {
    throw RuntimeFailure(what + " differ between trainer ranks (" +
                         std::to_string(static_cast<int>(ranks_off)) + " of " +
                         std::to_string(group.world_size()) + " differ from rank 0's" +
                         (mine > 0 ? ", this rank among them" : "") + ")");
  }
}

}  // namespace streamrl::dist
