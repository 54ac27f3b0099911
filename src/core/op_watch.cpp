#include "core/op_watch.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fmt/core.h>

#include "core/timer.hpp"

namespace meshbench::core {

std::string phase_now() {
  const char* p = g_phase.load(std::memory_order_relaxed);
  const int micro = g_phase_micro.load(std::memory_order_relaxed);
  return micro < 0 ? std::string(p ? p : "?") : fmt::format("{} (micro-batch {})", p ? p : "?", micro);
}

void OpWatch::publish(PeerState& p, const char* op, const char* group) noexcept {
  p.version.fetch_add(1, std::memory_order_acq_rel);  // odd: writing
  std::strncpy(p.op, op ? op : "?", sizeof p.op - 1);
  std::strncpy(p.group, group ? group : "?", sizeof p.group - 1);
  p.in_call.store(1, std::memory_order_relaxed);
  p.version.fetch_add(1, std::memory_order_release);  // even: done
}

void publish_phase(PeerState& p, const char* what, int micro) noexcept {
  p.version.fetch_add(1, std::memory_order_acq_rel);  // odd: writing
  std::strncpy(p.phase, what ? what : "?", sizeof p.phase - 1);
  p.micro.store(micro, std::memory_order_relaxed);
  p.version.fetch_add(1, std::memory_order_release);
}

bool read_peer(const PeerState& s, PeerCopy& out) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::uint64_t v = s.version.load(std::memory_order_acquire);
    if (v & 1) continue;
    char op[sizeof s.op], group[sizeof s.group], phase[sizeof s.phase];
    std::memcpy(op, s.op, sizeof op);
    std::memcpy(group, s.group, sizeof group);
    std::memcpy(phase, s.phase, sizeof phase);
    const int micro = s.micro.load(std::memory_order_relaxed);
    out.pid = s.pid.load(std::memory_order_relaxed);
    out.in_call = s.in_call.load(std::memory_order_acquire) != 0;
    if (s.version.load(std::memory_order_acquire) != v) continue;
    op[sizeof op - 1] = group[sizeof group - 1] = phase[sizeof phase - 1] = 0;
    out.op = op;
    out.group = group;
    out.phase = phase[0] == 0 || micro < 0 ? std::string(phase)
                                           : std::string(phase) + " (micro-batch " + std::to_string(micro) + ")";
    return out.pid != 0;
  }
  return false;
}

OpWatch::OpWatch() = default;
OpWatch::~OpWatch() { stop(); }

void OpWatch::set_context(const std::string& what) {
  int next = 1 - context_at_.load(std::memory_order_relaxed);
  context_[next] = what;
  context_at_.store(next, std::memory_order_release);
}

std::string OpWatch::context() const { return context_[context_at_.load(std::memory_order_acquire)]; }

std::vector<CallRecord> OpWatch::recent() const {
  std::uint64_t n = count_.load(std::memory_order_acquire);
  std::vector<CallRecord> out;
  std::uint64_t first = n > kRing ? n - kRing + 1 : 1;
  for (std::uint64_t k = first; k <= n; ++k) {
    const Slot& s = ring_[k % kRing];
    if (s.seq.load(std::memory_order_acquire) != k) continue;  // overwritten meanwhile
    const char* op = s.op.load(std::memory_order_relaxed);
    const char* group = s.group.load(std::memory_order_relaxed);
    out.push_back({k, op ? op : "?", group ? group : "?", s.bytes.load(std::memory_order_relaxed),
                   s.state.load(std::memory_order_acquire)});
  }
  return out;
}

void OpWatch::start(double timeout_s, std::function<void(const Hang&)> on_hang, bool watch_stalls) {
  stop();
  timeout_s_ = timeout_s;
  watch_stalls_ = watch_stalls;
  on_hang_ = std::move(on_hang);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { loop(); });
}

void OpWatch::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void OpWatch::loop() {
  // Poll often enough that "waited" is within 10% of the limit, and at least every second.
  auto period = std::chrono::duration<double>(std::clamp(timeout_s_ / 20, 0.01, 1.0));
  std::uint64_t seen = 0;
  double since = 0;
  // The stall clock: restarted whenever anything progresses or a call is pending.
  std::uint64_t progress = g_progress.load(std::memory_order_relaxed) + count_.load(std::memory_order_acquire);
  double still_since = now_seconds();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, period, [this] { return stop_; })) return;
    }
    std::uint64_t n = count_.load(std::memory_order_acquire);
    const Slot& s = ring_[n % kRing];
    bool pending = n != 0 && s.state.load(std::memory_order_acquire) == CallState::kPending;
    double now = now_seconds();
    const std::uint64_t p = g_progress.load(std::memory_order_relaxed) + n;
    if (pending || p != progress) {
      progress = p;
      still_since = now;
    }
    if (!pending) {
      seen = 0;
      if (!watch_stalls_ || now - still_since < timeout_s_) continue;
      Hang h;
      h.stalled = true;
      h.phase = phase_now();
      h.recent = recent();
      if (!h.recent.empty()) h.call = h.recent.back();
      h.waited_s = now - still_since;
      h.context = context();
      on_hang_(h);
      return;
    }
    if (n != seen) {
      seen = n;
      since = now;
      continue;
    }
    if (now - since < timeout_s_) continue;
    Hang h;
    h.phase = phase_now();
    h.recent = recent();
    h.call = h.recent.empty() ? CallRecord{} : h.recent.back();
    h.waited_s = now - since;
    h.context = context();
    on_hang_(h);
    return;
  }
}

}  // namespace meshbench::core
