// Trainer data parallelism across processes: a c10d Gloo process group joined
// through a TCPStore rendezvous described by torchrun's environment variables. Every call is a
// collective (all ranks call it in the same order) and every wait is bounded: a peer that died or
// stopped answering gives a RuntimeFailure (TimeoutError when the bound ran out) naming the
// operation, never a hang.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace streamrl::dist {

struct ProcessGroupOptions {
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR: where rank 0 hosts the TCPStore
  int master_port = 29500;                // MASTER_PORT
  int rank = 0;                           // RANK, in [0, world_size)
  int world_size = 1;                     // WORLD_SIZE
  int local_rank = 0;                     // LOCAL_RANK (rank on this machine; informational)
  // Bound on the rendezvous (all ranks must arrive within it) and on each collective.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

// Reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK (torchrun's conventions;
// LOCAL_RANK defaults to RANK). A world of one needs none of them: absent RANK and WORLD_SIZE give
// rank 0 of 1. Throws InputError with one line for a missing or malformed variable or RANK >=
// WORLD_SIZE.
ProcessGroupOptions process_group_options_from_env(
    std::chrono::milliseconds timeout = std::chrono::seconds(60));

class ProcessGroup {
 public:
  // Joins the group: rank 0 hosts the TCPStore, every rank connects and the Gloo context is built.
  // A world of one builds nothing and every collective is the identity. Throws TimeoutError when
  // the others do not all arrive within the timeout, RuntimeFailure for other network failures.
  explicit ProcessGroup(const ProcessGroupOptions& options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  // Seconds this rank has spent in collectives so far: the exchanges and the waits for the others.
  double collective_seconds() const { return collective_seconds_; }

  // Sums `tensors` (any float dtype, any device: Gloo reduces a host copy; e.g. every parameter's
  // gradient) elementwise across ranks, in place, in one coalesced exchange per dtype, or, with
  // `chunk_bytes` > 0, in exchanges of at most that many bytes (Lina cuts the gradient all-reduce
  // so an all-to-all can go between two chunks). The sums are the same either way.
  void all_reduce_sum(std::vector<torch::Tensor>& tensors, int64_t chunk_bytes = 0);
  // Sums plain numbers across ranks (e.g. the global token count that divides a summed loss), in
  // double precision, returned in the same order.
  std::vector<double> all_reduce_sum(const std::vector<double>& values);
  // Copies rank 0's `tensors` into every rank's, in place (e.g. initial parameters).
  void broadcast_from_rank0(std::vector<torch::Tensor>& tensors);
  // Rank 0's `bytes` on every rank (e.g. resumed optimizer state that only rank 0's disk holds).
  std::string broadcast_bytes_from_rank0(const std::string& bytes);
  // Every rank's `bytes`, in rank order, on every rank (e.g. the ranks' traces, for rank 0 to
  // merge without reading another host's files).
  std::vector<std::string> all_gather_bytes(const std::string& bytes);
  // All-to-all with unequal splits along dim 0 (expert parallelism's dispatch and combine): rows
  // [0, send[0]) of `x` go to rank 0, the next send[1] rows to rank 1, ...; returns the rows each
  // rank sent here, recv[j] rows from rank j in rank order. Not differentiable (see
  // ExpertParallelGroup). InputError when the splits do not match the world or `x`.
  torch::Tensor all_to_all(const torch::Tensor& x, const std::vector<int64_t>& send,
                           const std::vector<int64_t>& recv);
  // The same exchange started and left in flight (Gloo moves it on its own threads): `wait()`
  // returns the rows, bounded by the timeout. `x` must not change until then. Call wait() from
  // this group's owner thread, before the group goes; every rank starts its exchanges in the same
  // order.
  class PendingAllToAll {
   public:
    virtual ~PendingAllToAll() = default;
    virtual torch::Tensor wait() = 0;
    // Where the rows land: the tensor wait() returns, already shaped, filled only once it has.
    virtual torch::Tensor output() const = 0;
  };
  std::unique_ptr<PendingAllToAll> all_to_all_start(const torch::Tensor& x,
                                                    const std::vector<int64_t>& send,
                                                    const std::vector<int64_t>& recv);
  // Returns once every rank has called it.
  void barrier();

  // Point-to-point (pipeline parallelism's activations and gradients), matched by (peer, tag):
  // send returns at once, keeping its copy of `tensor` until the peer takes it; recv waits for the
  // peer's send of a tensor of `shape` and returns it on `options`' device. Not collectives: only
  // the two ranks call them. wait_sends() waits for every send still in flight (bounded, as recv).
  void send(const torch::Tensor& tensor, int dst, int tag);
  torch::Tensor recv(at::IntArrayRef shape, const torch::TensorOptions& options, int src, int tag);
  void wait_sends();

  // A group of the world's `ranks` (ascending; this rank among them), over the same rendezvous
  // store under its own `name`. Only its members call it, all with the same arguments; rank and
  // world_size of the result are within the subgroup. `timeout` (0: this group's) bounds its
  // rendezvous and every wait in it: e.g. a whole-world group for the ranks that wait while one
  // rank evaluates.
  std::unique_ptr<ProcessGroup> subgroup(const std::vector<int>& ranks, const std::string& name,
                                         std::chrono::milliseconds timeout = {});

 private:
  struct Impl;
  ProcessGroup(const ProcessGroupOptions& options, std::unique_ptr<Impl> impl);
  ProcessGroupOptions options_;
  std::unique_ptr<Impl> impl_;
  double collective_seconds_ = 0;
  struct PendingSend;
  std::vector<PendingSend> sends_;
};

// Sums the gradients of `parameters` across ranks, in place. A parameter with a gradient on some
// rank gets the sum (a rank without one contributes zeros); one without a gradient anywhere keeps
// none. Call after backward and before clipping and the optimizer step, with each rank's loss
// summed over its samples; then divide by the global denominator (all_reduce_sum of the counts).
void all_reduce_gradients(ProcessGroup& group, const std::vector<torch::Tensor>& parameters,
                          int64_t chunk_bytes = 0);

// Throws RuntimeFailure on every rank, naming `what`, when some rank's `tensors` differ from rank
// 0's (by a checksum; relative tolerance 1e-6). Data-parallel ranks must hold the same weights: a
// rank that resumed without rank 0's optimizer state, or missed a step, would drift silently.
void check_same_on_every_rank(ProcessGroup& group, const std::vector<torch::Tensor>& tensors,
                              const std::string& what);

}  // namespace streamrl::dist
