#include <cstdlib>
#include <cstring>
#include <new>

#include "compute/device.hpp"

namespace meshbench::compute {

Buffer::Buffer(MemKind mem, std::size_t bytes) : mem_(mem), bytes_(bytes) {
  if (bytes == 0) return;
  if (mem == MemKind::kDevice) {
    data_ = device_alloc(bytes);
  } else {
    // 4 KiB alignment: page-aligned host buffers, as MPI and pinned copies prefer.
    data_ = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, bytes);
  }
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept : mem_(o.mem_), data_(o.data_), bytes_(o.bytes_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    mem_ = o.mem_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::release() noexcept {
  if (!data_) return;
  if (mem_ == MemKind::kDevice) device_free(data_);
  else std::free(data_);
  data_ = nullptr;
}

void Buffer::upload(const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  if (mem_ == MemKind::kDevice) copy_to_device(data_, host, bytes);
  else std::memcpy(data_, host, bytes);
}

void Buffer::download(void* host, std::size_t bytes) const {
  if (bytes == 0) return;
  if (mem_ == MemKind::kDevice) copy_to_host(host, data_, bytes);
  else std::memcpy(host, data_, bytes);
}

}  // namespace meshbench::compute
