// c10d Gloo process group over a TCPStore rendezvous (see process_group.h).

// Debian's libtorch is built with Gloo (libtorch_cpu links libgloo and exports ProcessGroupGloo)
// but its CMake config does not export the macro that unlocks the header.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include "streamrl/dist/process_group.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
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
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
};

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
    // Ranks on one machine talk over loopback; across machines over the interface that the
    // hostname resolves to, or the one GLOO_SOCKET_IFNAME names (as in PyTorch).
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
      go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (is_loopback(options_.master_addr)) {
      go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      go->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    go->threads = 1;  // collectives are issued one at a time from the trainer thread
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, options_.rank,
                                                            options_.world_size, go);
  } catch (const std::exception& e) {
    const std::string msg =
        where + " failed (timeout " + seconds(options_.timeout) + "): " + first_line(e.what());
    if (looks_like_timeout(e.what())) throw TimeoutError(msg);
    throw RuntimeFailure(msg);
  }
}

ProcessGroup::~ProcessGroup() = default;

namespace {

// Waits for `work` and turns a Gloo failure into one clear line.
void wait_for(const c10::intrusive_ptr<c10d::Work>& work, const std::string& op,
              const ProcessGroupOptions& o) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    const std::string msg = "process group rank " + std::to_string(o.rank) + " of " +
                            std::to_string(o.world_size) + ": " + op +
                            " failed (a peer died or did not answer within " + seconds(o.timeout) +
                            "): " + first_line(e.what());
    if (looks_like_timeout(e.what())) throw TimeoutError(msg);
    throw RuntimeFailure(msg);
  }
}

// Runs `collective` on one flat buffer per dtype and copies the result back into `tensors`, so
// one exchange carries many small tensors (as DDP's buckets do).
template <typename F>
void flat_exchange(std::vector<torch::Tensor>& tensors, F&& collective) {
  torch::NoGradGuard no_grad;
  std::map<c10::ScalarType, std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined() || !tensors[i].device().is_cpu()) {
      throw InputError("process group: tensor " + std::to_string(i) +
                       " is undefined or not on the CPU");
    }
    groups[tensors[i].scalar_type()].push_back(i);
  }
  for (const auto& [dtype, idx] : groups) {
    std::vector<torch::Tensor> parts;
    for (size_t i : idx) parts.push_back(tensors[i].detach().reshape({-1}));
    std::vector<torch::Tensor> buf = {torch::cat(parts)};
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

void ProcessGroup::all_reduce_sum(std::vector<torch::Tensor>& tensors) {
  if (!impl_) return;
  flat_exchange(tensors, [&](std::vector<torch::Tensor>& buf) {
    wait_for(impl_->pg->allreduce(buf), "all_reduce", options_);
  });
}

std::vector<double> ProcessGroup::all_reduce_sum(const std::vector<double>& values) {
  if (!impl_ || values.empty()) return values;
  std::vector<torch::Tensor> buf = {
      torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble))};
  wait_for(impl_->pg->allreduce(buf), "all_reduce of scalars", options_);
  const double* p = buf[0].data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

void ProcessGroup::broadcast_from_rank0(std::vector<torch::Tensor>& tensors) {
  if (!impl_) return;
  flat_exchange(tensors, [&](std::vector<torch::Tensor>& buf) {
    c10d::BroadcastOptions bo;
    bo.rootRank = 0;
    wait_for(impl_->pg->broadcast(buf, bo), "broadcast", options_);
  });
}

void ProcessGroup::barrier() {
  if (!impl_) return;
  wait_for(impl_->pg->barrier(), "barrier", options_);
}

void all_reduce_gradients(ProcessGroup& group, const std::vector<torch::Tensor>& parameters) {
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
  group.all_reduce_sum(grads);
}

}  // namespace streamrl::dist
