// Moving tensors between a rank's flat layout and the full (unsharded) model's, by entry
// name and the entry's Shard (layout.hpp). Every rank initialises from the full canonical
// weights and keeps its slice (take_from_full); the check puts each rank's gradients and
// parameters back into their places in the full layout (place_in_full) and compares them,
// over the elements the rank owns, with the single-rank reference. One rule serves tensor
// parallel (row and column slices, fused parts, a padded vocabulary), pipeline stages and
// experts (entries a rank does not hold) and replicas.
// Not here: communication (the check gathers), the layouts themselves (model.cpp).
#pragma once

#include <cstdint>
#include <functional>

#include "common/layout.hpp"

namespace meshbench::parallel {

// Calls run(local_off, full_off, n) for each contiguous run of `e`'s elements: local flat
// offset, full flat offset in `full` (-1: padding that exists only locally), length.
// Throws std::out_of_range when `full` has no entry of e's name, std::logic_error when the
// shapes do not fit the rule.
void for_each_run(const LayoutEntry& e, const LayoutEntry& full,
                  const std::function<void(int64_t local_off, int64_t full_off, int64_t n)>& run);

// Copies every tensor of `local_flat` (laid out by `local`) into its place in `full_flat`
// (laid out by `full`) and sets owned[i] = 1 for each full element written. owned may be null.
template <typename S>
void place_in_full(const Layout& local, const S* local_flat, const Layout& full, S* full_flat,
                   uint8_t* owned);

// The inverse: fills `local_flat` with this rank's slices of `full_flat` (padding rows 0;
// the gaps between entries are left alone).
template <typename S>
void take_from_full(const Layout& full, const S* full_flat, const Layout& local, S* local_flat);

}  // namespace meshbench::parallel
