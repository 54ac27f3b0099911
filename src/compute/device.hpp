// Devices and device memory behind a plain C++ interface: CUDA types never appear here.
// Without CUDA (or without a visible GPU) device_count() is 0 and the rest throws
// UsageError naming what is missing, so drivers can refuse `--mem device` cleanly.
#pragma once

#include <cstddef>
#include <string>

namespace meshbench::compute {

enum class MemKind { kHost, kDevice };

bool built_with_cuda();
int device_count();               // 0 when CUDA is absent or no GPU is usable; never throws
std::string device_name(int index);
std::string cuda_version();       // "13.0" or "none"
void set_device(int index);

void* device_alloc(std::size_t bytes);
void device_free(void* p) noexcept;
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
// Blocks until the work queued on an opaque compute stream (a cudaStream_t; null: the legacy
// default stream) has finished. Without CUDA there is no queued work: it returns at once.
void stream_synchronize(void* stream);

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
