// Devices and device memory behind a plain C++ interface: CUDA types never appear here.
// Without CUDA (or without a usable GPU) device_count() is 0 and the rest throws
// UsageError naming what is missing, so drivers can refuse `--mem device` cleanly;
// probe_gpus() says why (no GPU at all, or a GPU that CUDA cannot use).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace meshbench::compute {

enum class MemKind { kHost, kDevice };

// kAbsent: built without CUDA, no NVIDIA driver, or the driver sees no device (tests skip).
// kUnusable: a driver is there but CUDA fails (e.g. cudaErrorInsufficientDriver: the driver
// is older than this build's runtime); GPU tests fail on it instead of skipping.
enum class GpuState { kUsable, kAbsent, kUnusable };
struct GpuProbe {
  GpuState state = GpuState::kAbsent;
  int count = 0;       // devices when usable
  std::string detail;  // the CUDA error by name and number, driver and runtime versions
};
GpuProbe probe_gpus();            // never throws

bool built_with_cuda();
int device_count();               // 0 unless probe_gpus() says usable; never throws
std::string device_name(int index);
std::string cuda_version();       // "13.0" or "none"
void set_device(int index);

// Bytes this process can still allocate: on the current device (cudaMemGetInfo's free; 0
// without CUDA), and on the host (MemAvailable of /proc/meminfo, lowered to what the
// process's cgroup limit leaves; 0 when unknown). Read before a run allocates its model.
std::size_t device_memory_free();
std::size_t host_memory_available();

void* device_alloc(std::size_t bytes);
void device_free(void* p) noexcept;
// Copies queued on `stream` (an opaque cudaStream_t; null: the legacy default stream) that
// have completed when they return.
void copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream = nullptr);
void copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream = nullptr);
// Blocks until the work queued on an opaque compute stream (a cudaStream_t; null: the legacy
// default stream) has finished. Without CUDA there is no queued work: it returns at once.
void stream_synchronize(void* stream);

// Device timestamps (issue 44, item 6): CUDA events recorded on any stream of the device,
// read once the work has run, as seconds on the host's clock (core::now_seconds) through an
// anchor event recorded on an idle stream at a known host time. mark() is an event queued on
// a stream (it does not block); resolve() reads every mark (the events normally have run
// already: it waits only for one that has not) and is called after the timed work, off the
// clock. Events are reused from step to step. Without CUDA, mark() is -1 and nothing is
// recorded.
class DeviceClock {
 public:
  DeviceClock();
  ~DeviceClock();
  DeviceClock(const DeviceClock&) = delete;
  DeviceClock& operator=(const DeviceClock&) = delete;
  void start(void* stream, double t_host);  // the anchor, at host time t_host; forgets the marks
  int mark(void* stream);                   // an event queued on `stream`; its index
  void resolve();
  double at(int mark) const;                // host-clock seconds of a mark, after resolve()
  int marks() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A byte buffer in host or device memory, owned (RAII).
class Buffer {
 public:
  Buffer() = default;
  Buffer(MemKind mem, std::size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  MemKind mem() const { return mem_; }
  void upload(const void* host, std::size_t bytes);      // host -> this buffer
  void download(void* host, std::size_t bytes) const;    // this buffer -> host

 private:
  void release() noexcept;
  MemKind mem_ = MemKind::kHost;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace meshbench::compute
