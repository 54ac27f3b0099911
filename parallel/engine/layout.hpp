// A layout table: one flat allocation described by (name, shape, offset) entries, as llm.c's
// parameter size table. Parameters, gradients and both Adam moments share one layout, so the
// optimizer and (later) the gradient collectives treat them as one flat array. The shard rule
// is a property of the entry; this issue runs everything replicated on one rank, and the
// parallel strategies (TP, ZeRO) fill in the other rules without moving tensors around.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshbench::parallel {

enum class ShardRule {
  kReplicated,  // every rank holds the full tensor (all of issue 4)
  kRowSplit,    // dim 0 split across the TP group (column-parallel linear: qkv, fc)
  kColSplit,    // dim 1 split across the TP group (row-parallel linear: proj, fcproj)
};

struct LayoutEntry {
  std::string name;            // "h.0.attn.qkv.weight"
  std::vector<int64_t> shape;  // row-major, e.g. {QKV, C}
  int64_t offset = 0;          // elements from the start of the flat array
  int64_t numel = 0;
  bool weight_decay = false;   // AdamW decays matrices, not biases or norm parameters
  ShardRule shard = ShardRule::kReplicated;
};

class Layout {
 public:
  // Appends an entry at the current end; returns its offset. Offsets are aligned to 16
  // elements (64 bytes in float32) so each tensor starts on a cache line.
  int64_t add(std::string name, std::vector<int64_t> shape, bool weight_decay,
              ShardRule shard = ShardRule::kReplicated);
  const std::vector<LayoutEntry>& entries() const { return entries_; }
  int64_t total() const { return total_; }  // elements, padding included
  const LayoutEntry& find(const std::string& name) const;  // throws std::out_of_range
  // Ends a unit that started at `unit_lo`: pads the total so the unit's length is a multiple
  // of `multiple` (ZeRO splits each unit evenly over the data-parallel ranks).
  void pad_unit(int64_t unit_lo, int64_t multiple);

 private:
  std::vector<LayoutEntry> entries_;
  int64_t total_ = 0;
};

}  // namespace meshbench::parallel
