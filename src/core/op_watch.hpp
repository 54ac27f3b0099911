// The hang watchdog: a per-rank record of the communication call in progress, a flight
// recorder of the last 64 calls (PyTorch's NCCL flight recorder, in small), and a thread
// that fires when one call has been pending longer than a limit. The calling thread only
// stores into atomics (no locks, no clock reads), so the timed loop pays a few stores per
// call; the watchdog thread stamps a call when it first sees it pending, so "waited" is
// accurate to one poll interval. Not here: what to do on a hang (the callback decides:
// print, dump, mark the output, abort) and which calls to watch (comm/watched_comm.hpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace meshbench::core {

enum class CallState : std::uint8_t { kEmpty = 0, kPending = 1, kDone = 2 };

// A copy of one flight-recorder entry (seq counts calls from 1).
struct CallRecord {
  std::uint64_t seq = 0;
  std::string op, group;
  std::uint64_t bytes = 0;
  CallState state = CallState::kEmpty;
};

struct Hang {
  CallRecord call;            // the pending call
  double waited_s = 0;        // since the watchdog first saw it pending
  std::string context;        // the caller's words: "size 7 (8192 B) out-of-place, timed loop"
  std::vector<CallRecord> recent;  // oldest first, up to 64, the pending call last
};

class OpWatch {
 public:
  static constexpr std::size_t kRing = 64;
  OpWatch();
  ~OpWatch();
  OpWatch(const OpWatch&) = delete;
  OpWatch& operator=(const OpWatch&) = delete;

  // The calling thread. `op` and `group` must outlive the watch (literals, a communicator's
  // name). begin() returns the call's sequence number for end().
  std::uint64_t begin(const char* op, std::uint64_t bytes, const char* group) noexcept {
    std::uint64_t n = count_.load(std::memory_order_relaxed) + 1;
    Slot& s = ring_[n % kRing];
    s.state.store(CallState::kPending, std::memory_order_relaxed);
    s.op.store(op, std::memory_order_relaxed);
    s.group.store(group, std::memory_order_relaxed);
    s.bytes.store(bytes, std::memory_order_relaxed);
    s.seq.store(n, std::memory_order_release);
    count_.store(n, std::memory_order_release);
    return n;
  }
  void end(std::uint64_t seq) noexcept { ring_[seq % kRing].state.store(CallState::kDone, std::memory_order_release); }

  // Where the caller is (a size, a phase); copied, so call it outside hot loops.
  void set_context(const std::string& what);

  // Starts the watchdog thread (restarts it when running): `on_hang` runs on it once, when
  // one call has been pending for `timeout_s` (> 0). The callback is expected not to return
  // (it aborts the job). stop() returns at once.
  void start(double timeout_s, std::function<void(const Hang&)> on_hang);
  void stop();

  std::vector<CallRecord> recent() const;  // oldest first
  std::string context() const;

 private:
  struct Slot {
    std::atomic<std::uint64_t> seq{0};
    std::atomic<const char*> op{nullptr}, group{nullptr};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<CallState> state{CallState::kEmpty};
  };
  void loop();

  Slot ring_[kRing];
  std::atomic<std::uint64_t> count_{0};
  // Context: two buffers, the index of the readable one flips after a write.
  std::string context_[2];
  std::atomic<int> context_at_{0};
  double timeout_s_ = 0;
  std::function<void(const Hang&)> on_hang_;
  std::mutex mu_;                 // only for the thread's sleep, so stop() wakes it at once
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace meshbench::core
