#include "core/op_watch.hpp"

#include <algorithm>
#include <chrono>

#include "core/timer.hpp"

namespace meshbench::core {

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

void OpWatch::start(double timeout_s, std::function<void(const Hang&)> on_hang) {
  stop();
  timeout_s_ = timeout_s;
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
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, period, [this] { return stop_; })) return;
    }
    std::uint64_t n = count_.load(std::memory_order_acquire);
    const Slot& s = ring_[n % kRing];
    bool pending = n != 0 && s.state.load(std::memory_order_acquire) == CallState::kPending;
    if (!pending) {
      seen = 0;
      continue;
    }
    double now = now_seconds();
    if (n != seen) {
      seen = n;
      since = now;
      continue;
    }
    if (now - since < timeout_s_) continue;
    Hang h;
    h.recent = recent();
    h.call = h.recent.empty() ? CallRecord{} : h.recent.back();
    h.waited_s = now - since;
    h.context = context();
    on_hang_(h);
    return;
  }
}

}  // namespace meshbench::core
