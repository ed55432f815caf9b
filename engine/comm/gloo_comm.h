// The Gloo backend of Comm (CPU collectives over TCP). Every group a rank belongs to gets its own
// Gloo context, connected through the rendezvous store under the group's id; reduce_scatter and
// all_gather are in-place rings over Gloo's point-to-point buffers (Gloo has no in-place form of
// either), the rest are Gloo's own algorithms. Every operation carries comm.timeout_s.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "engine/comm/comm.h"
#include "engine/rendezvous/store.h"

namespace ptrain::dist {

struct GlooOptions {
  std::string address;                // this rank's address, as peers reach it
  std::chrono::milliseconds timeout;  // of every collective and of connecting
};

// Connects the world group (collective: every rank calls it). `store` must outlive the Comm.
std::unique_ptr<Comm> make_gloo_comm(StoreClient& store, int rank, int world, const GlooOptions& options);

}  // namespace ptrain::dist
