// The hang watchdog: a per-rank record of the communication call in progress, a flight
// recorder of the last 64 calls (PyTorch's NCCL flight recorder, in small), and a thread
// that fires when one call has been pending longer than a limit. The calling thread only
// stores into atomics (no locks, no clock reads), so the timed loop pays a few stores per
// call; the watchdog thread stamps a call when it first sees it pending, so "waited" is
// accurate to one poll interval. With `watch_stalls`, the thread also fires when no call is
// pending and nothing has progressed for the limit: no call begun or ended, no GEMM finished
// (compute::gemm notes each one), no modelled wait passed; a BLAS call spinning in its
// allocator, or a kernel that never returns, ends the run like a hung call does (issue 45).
// Not here: what to do on a hang (the callback decides: print, dump, mark the output, abort)
// and which calls to watch (comm/watched_comm.hpp).
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

// One rank's call state where its host's other ranks can read it (comm/peer_board.hpp maps an
// array of these in shared memory): the call it is in, or the last one it left, so the rank
// whose call hangs can say which of the group's ranks never arrived. Written by the owner
// only; `version` is odd while a write is under way (a reader retries).
struct PeerState {
  std::atomic<std::uint64_t> version{0};
  std::atomic<std::int64_t> pid{0};
  std::atomic<std::uint32_t> in_call{0};
  std::atomic<std::int32_t> micro{-1};
  char op[64] = {};
  char group[32] = {};
  char phase[48] = {};  // set_phase's words: what the rank computes outside calls
};
struct PeerCopy {
  std::int64_t pid = 0;
  bool in_call = false;
  std::string op, group, phase;  // phase: "forward (micro-batch 0)"
};
// This process's state on its host's board (comm/peer_board.hpp; null without one).
inline std::atomic<PeerState*> g_peer{nullptr};
void publish_phase(PeerState& p, const char* what, int micro) noexcept;
// A consistent copy of `s` (false: it kept changing, or nobody has written it).
bool read_peer(const PeerState& s, PeerCopy& out);

// Progress outside the watched calls, one counter per process: compute bumps it (each GEMM,
// each modelled compute wait), and the step engine names the phase it is in. Relaxed atomic
// stores: a few nanoseconds beside a GEMM.
inline std::atomic<std::uint64_t> g_progress{0};
inline std::atomic<const char*> g_phase{"set-up"};
inline std::atomic<int> g_phase_micro{-1};
inline void note_progress() noexcept { g_progress.fetch_add(1, std::memory_order_relaxed); }
// `what` must be a literal (or outlive the process's watch); micro -1: none.
inline void set_phase(const char* what, int micro = -1) noexcept {
  g_phase.store(what, std::memory_order_relaxed);
  g_phase_micro.store(micro, std::memory_order_relaxed);
  if (PeerState* p = g_peer.load(std::memory_order_relaxed)) publish_phase(*p, what, micro);
  note_progress();
}
// "forward (micro-batch 3)", "set-up"
std::string phase_now();

// A copy of one flight-recorder entry (seq counts calls from 1).
struct CallRecord {
  std::uint64_t seq = 0;
  std::string op, group;
  std::uint64_t bytes = 0;
  CallState state = CallState::kEmpty;
};

struct Hang {
  bool stalled = false;       // no call pending: nothing progressed (compute) for the limit
  std::string phase;          // phase_now() when it fired
  CallRecord call;            // the pending call (a stall: the last call, done or empty)
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
    if (PeerState* p = peer_.load(std::memory_order_relaxed)) publish(*p, op, group);
    return n;
  }
  void end(std::uint64_t seq) noexcept {
    ring_[seq % kRing].state.store(CallState::kDone, std::memory_order_release);
    if (PeerState* p = peer_.load(std::memory_order_relaxed)) p->in_call.store(0, std::memory_order_release);
    note_progress();
  }

  // Where begin() and end() also publish this rank's call state (null: nowhere).
  void set_peer_state(PeerState* p) noexcept {
    peer_.store(p, std::memory_order_release);
    g_peer.store(p, std::memory_order_release);
  }

  // Where the caller is (a size, a phase); copied, so call it outside hot loops.
  void set_context(const std::string& what);

  // Starts the watchdog thread (restarts it when running): `on_hang` runs on it once, when
  // one call has been pending for `timeout_s` (> 0). The callback is expected not to return
  // (it aborts the job). stop() returns at once. `watch_stalls`: also fire when nothing has
  // progressed for `timeout_s` with no call pending (above).
  void start(double timeout_s, std::function<void(const Hang&)> on_hang, bool watch_stalls = false);
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
  static void publish(PeerState& p, const char* op, const char* group) noexcept;

  std::atomic<PeerState*> peer_{nullptr};
  Slot ring_[kRing];
  std::atomic<std::uint64_t> count_{0};
  // Context: two buffers, the index of the readable one flips after a write.
  std::string context_[2];
  std::atomic<int> context_at_{0};
  double timeout_s_ = 0;
  bool watch_stalls_ = false;
  std::function<void(const Hang&)> on_hang_;
  std::mutex mu_;                 // only for the thread's sleep, so stop() wakes it at once
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace meshbench::core
