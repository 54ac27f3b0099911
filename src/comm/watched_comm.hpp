// A Communicator that reports every call to a core::OpWatch (the hang watchdog's record)
// and forwards it to the backend it wraps: the one place where collective, point-to-point,
// barrier and synchronize calls are watched, so no call of a driver escapes the watchdog.
// Costs a virtual call and a few atomic stores per call (tests/bench/harness_bench.cpp).
#pragma once

#include <memory>

#include "comm/communicator.hpp"
#include "core/op_watch.hpp"

namespace meshbench::comm {

// `watch` must outlive the returned communicator.
std::unique_ptr<Communicator> make_watched(std::unique_ptr<Communicator> inner, core::OpWatch& watch);

// Watches a call made outside a Communicator (MPI on the world, a collective HDF5 write).
class WatchScope {
 public:
  WatchScope(core::OpWatch* w, const char* op, std::uint64_t bytes, const char* group)
      : w_(w), seq_(w ? w->begin(op, bytes, group) : 0) {}
  ~WatchScope() {
    if (w_) w_->end(seq_);
  }
  WatchScope(const WatchScope&) = delete;
  WatchScope& operator=(const WatchScope&) = delete;

 private:
  core::OpWatch* w_;
  std::uint64_t seq_;
};

}  // namespace meshbench::comm
