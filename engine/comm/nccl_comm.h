// The NCCL backend of Comm, for ranks that each own a GPU (docs/cuda.md, "Collectives": it runs NCCL;
// ranks that share a GPU cannot share an NCCL communicator and use Gloo with host staging instead).
//
// Communicators: rank 0 creates the world's unique id and publishes it through the rendezvous
// store; every group of two or more ranks is split from the world communicator, by every rank (a
// split is collective over its parent). All are non-blocking (config.blocking = 0), so creating
// and aborting them can be polled against comm.timeout_s instead of hanging.
//
// Streams: collectives run on one comm stream of their own. On device memory a collective waits
// for what is already enqueued on the compute stream, and the compute stream waits for it (or, for
// an overlapped one, only at join(ticket)), through events: the host never blocks, so a step has no
// host sync, and the collective stays in flight in the log until the device has finished it. Host
// memory (loss sums, flags, checkpoint manifests) is staged through a device buffer and waited for,
// bounded by the timeout. all_to_allv takes `in` and `out` of the same kind.
//
// Point to point (the pipeline's messages): without open_channels, sends and receives go over the
// group's communicator on channel 0 only, on the comm stream. open_channels gives each channel a
// communicator of its own (two ranks, one direction: messages on one never wait behind another's),
// connected by one warm-up message (NCCL connects a pair on its first message, whose issue would
// otherwise wait for the peer's), and its sender a stream of its own: isend from device memory is
// enqueued there after the compute stream's work and stays in flight, the host going on; waiting
// for it orders the compute stream after it. Receives run on the comm stream, in program order with
// the collectives, and the compute stream waits for them. So the device keeps the schedule's
// execution contract (pipeline/schedule.h: sends in flight, receives in order) with no host sync,
// provided the streams run side by side: open_channels refuses CUDA_DEVICE_MAX_CONNECTIONS=1. isend
// from host memory is a send at once. An error that unwinds past work in flight aborts every
// communicator (abandon_in_flight), so that freeing buffers does not wait for peers forever.
//
// Hangs and errors: a watchdog thread polls every communicator's asynchronous error and the oldest
// collective still running on the device. On an error or a collective older than the timeout it
// aborts every communicator and calls NcclOptions::on_failure with a message naming the collective
// (op, group, sequence number, bytes) and this rank's collective log; the caller reports it and
// exits. Synchronous waits (host staging, barrier) throw CollectiveError instead.
//
// Built only with CUDA and NCCL, into the CUDA module (libptrain_cuda.so), which hands the functions
// below out as an NcclBackend (nccl_module_entry.cpp); this header keeps CUDA types out (the class
// and its files by job: nccl_comm_impl.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "engine/comm/comm.h"
#include "engine/rendezvous/store.h"

namespace ptrain::dist {

// Called once, from the watchdog thread, after the communicators were aborted: `what` names the
// failed collective, `log` is this rank's collective log. It should not return (report and exit):
// after it, every collective of this Comm throws.
using NcclFailureFn = std::function<void(const std::string& what, const std::string& log)>;

struct NcclOptions {
  std::chrono::milliseconds timeout{0};  // of connecting, and of every collective
  void* compute_stream = nullptr;        // the cudaStream_t the engine's kernels run on
  NcclFailureFn on_failure;
};

// Connects the world communicator on the current CUDA device (collective: every rank calls it).
// `store` must outlive the Comm.
std::unique_ptr<Comm> make_nccl_comm(StoreClient& store, int rank, int world, const NcclOptions& options);

// The CUDA devices this process sees; 0 without a driver or device. Never throws.
int visible_cuda_devices();

// The UUID of the current CUDA device (what tells two ranks' GPUs apart across CUDA_VISIBLE_DEVICES
// masks and machines); empty when there is none. Never throws.
std::string current_cuda_device_uuid();

// The module's table of the above (its entry point ptrain_nccl_backend()).
struct NcclBackend {
  std::unique_ptr<Comm> (*make_comm)(StoreClient& store, int rank, int world, const NcclOptions& options);
  int (*visible_devices)();
  std::string (*current_device_uuid)();
};

}  // namespace ptrain::dist
