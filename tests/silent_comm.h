// A Comm for tests that build what a rank allocates without communicating: groups are made, every
// collective or message throws (a test's subclass may let one through).
#pragma once

#include "engine/comm/comm.h"

namespace ptrain::test {

class SilentComm : public dist::Comm {
 public:
  SilentComm(int rank, int world) : Comm(rank, world) {}
  const char* backend() const override { return "silent"; }
  bool sends_in_flight() const override { return true; }  // it sends nothing at all

 protected:
  void connect(const dist::Group&) override {}
  [[noreturn]] static void none() { throw dist::DistError("no communication expected"); }
  void do_all_reduce(const dist::Group&, void*, std::size_t, dist::ElemType, dist::ReduceOp, bool) override {
    none();
  }
  void do_reduce_scatter(const dist::Group&, void*, std::size_t, dist::ElemType, bool) override { none(); }
  void do_all_gather(const dist::Group&, void*, std::size_t, dist::ElemType, bool) override { none(); }
  void do_all_to_allv(const dist::Group&, const float*, const std::vector<std::size_t>&, float*,
                      const std::vector<std::size_t>&) override {
    none();
  }
  void do_broadcast(const dist::Group&, void*, std::size_t, int) override { none(); }
  void do_send(const dist::Group&, const void*, std::size_t, int, int) override { none(); }
  void do_recv(const dist::Group&, void*, std::size_t, int, int) override { none(); }
  void do_barrier(const dist::Group&) override { none(); }
};

}  // namespace ptrain::test
