#include "common/layout.hpp"

#include <stdexcept>

namespace meshbench::parallel {

int64_t Layout::numel() const {
  int64_t n = 0;
  for (const LayoutEntry& e : entries_) n += e.numel;
  return n;
}

int64_t Layout::add(std::string name, std::vector<int64_t> shape, bool weight_decay, Shard shard) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const int64_t offset = (total_ + 15) / 16 * 16;
  entries_.push_back({std::move(name), std::move(shape), offset, numel, weight_decay, std::move(shard)});
  total_ = offset + numel;
  return offset;
}

void Layout::pad_unit(int64_t unit_lo, int64_t multiple) {
  if (multiple > 1) total_ = unit_lo + (total_ - unit_lo + multiple - 1) / multiple * multiple;
}

const LayoutEntry* Layout::find_if(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

const LayoutEntry& Layout::find(const std::string& name) const {
  if (const LayoutEntry* e = find_if(name)) return *e;
  throw std::out_of_range("layout has no entry " + name);
}

}  // namespace meshbench::parallel
