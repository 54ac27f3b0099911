// A layout table: one flat allocation described by (name, shape, offset) entries, as llm.c's
// parameter size table. Parameters, gradients and both Adam moments share one layout, so the
// optimizer and the gradient collectives treat them as one flat array. How a rank's tensor
// is cut from the full (unsharded) tensor of the same name is a property of the entry (its
// Shard), so canonical initialisation and the check (sharding.hpp) work by name for any
// plan: a pipeline stage simply lacks the other stages' entries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshbench::parallel {

enum class ShardRule {
  kReplicated,  // every rank holds the full tensor
  kRowSplit,    // dim 0 split across the TP group (column-parallel linear: qkv, fc; vocabulary)
  kColSplit,    // dim 1 split across the TP group (row-parallel linear: proj, fcproj)
};

// Where this rank's tensor sits in the full tensor. kRowSplit: rank `index` of `count` holds
// rows [index x r, (index + 1) x r) of each part, r the part's local rows; a fused tensor
// lists its parts' local row counts (qkv: [q | k | v] heads), otherwise one part. Rows of the
// padded full tensor at or beyond full_rows (a vocabulary padded to a multiple of count)
// exist only locally: zero, and dropped when gathered. kColSplit: columns likewise.
struct Shard {
  ShardRule rule = ShardRule::kReplicated;
  int index = 0, count = 1;
  std::vector<int64_t> parts;  // local rows per part (kRowSplit); empty: one part
  int64_t full_rows = -1;      // kRowSplit: rows of the real full tensor; -1: count x rows
};

struct LayoutEntry {
  std::string name;            // "h.0.attn.qkv.weight"
  std::vector<int64_t> shape;  // row-major, e.g. {QKV, C}
  int64_t offset = 0;          // elements from the start of the flat array
  int64_t numel = 0;
  bool weight_decay = false;   // AdamW decays matrices, not biases or norm parameters
  Shard shard;
};

class Layout {
 public:
  // Appends an entry at the current end; returns its offset. Offsets are aligned to 16
  // elements (64 bytes in float32) so each tensor starts on a cache line.
  int64_t add(std::string name, std::vector<int64_t> shape, bool weight_decay, Shard shard = {});
  const std::vector<LayoutEntry>& entries() const { return entries_; }
  int64_t total() const { return total_; }  // elements, padding included
  int64_t numel() const;                     // elements of the tensors, padding left out
  const LayoutEntry& find(const std::string& name) const;  // throws std::out_of_range
  const LayoutEntry* find_if(const std::string& name) const;  // null when absent
  // Ends a unit that started at `unit_lo`: pads the total so the unit's length is a multiple
  // of `multiple` (ZeRO splits each unit evenly over the data-parallel ranks).
  void pad_unit(int64_t unit_lo, int64_t multiple);

 private:
  std::vector<LayoutEntry> entries_;
  int64_t total_ = 0;
};

}  // namespace meshbench::parallel
