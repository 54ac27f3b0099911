// The MoE dispatch plan (moe_layers.hpp moe_plan) as the CUDA kernels compute it over many
// blocks (cuda/moe_kernels.cuh k_moe_plan_*), with the per-thread steps as host-and-device
// functions, so that the CPU emulation of the CUDA backend (backend_emulated.cpp) runs the
// kernels' own steps in the kernels' own decomposition (issue 44, item 12: the plan was one
// block of E threads, which no launch allows past E = 1024). Four launches:
//   1. ranks: one block per chunk of kChunk assignments, one thread per assignment: its rank
//      among the chunk's earlier assignments to the same expert (a stable order, no atomics),
//      and the chunk's count per expert (written by the expert's last assignment in the chunk);
//   2. experts: one thread per expert: the exclusive scan of its counts over the chunks (the
//      chunk's base), its total, and its summed router probability in token order;
//   3. offsets: one block of kScanThreads threads, each owning a run of experts: the exclusive
//      scan of the kept counts (capacity-limited), so any E fits one launch;
//   4. slots: one thread per assignment: row = offset + base + rank, or -1 past the capacity.
// Not here: the reference (moe_layers.cpp moe_plan), which this must equal element for element.
#pragma once

#include "kernels/host_device.hpp"

#include <cstddef>
#include <cstdint>

namespace meshbench::parallel::moe_plan_blocks {

constexpr int kChunk = 256;        // assignments per block of launches 1 and 4 (one thread each)
constexpr int kExpertThreads = 256;  // threads per block of launch 2
constexpr int kScanThreads = 1024;   // the one block of launch 3
constexpr int kMaxBlockThreads = 1024;  // CUDA's limit on a block

struct Launch {
  int blocks, threads;
};
// The four launches' geometry for N tokens, k choices and E experts, and the scratch they need:
// hist and base, chunks x E int32 each.
struct Plan {
  int64_t assignments, chunks, experts;
  Launch ranks, per_expert, offsets, slots;
  int64_t scratch_ints() const { return 2 * chunks * experts; }
};
inline Plan plan(int N, int E, int k) {
  const int64_t A = int64_t(N) * k, C = (A + kChunk - 1) / kChunk;
  const int cb = int(C > 0 ? C : 1);
  return Plan{A, C, E, {cb, kChunk}, {int((E + kExpertThreads - 1) / kExpertThreads), kExpertThreads},
              {1, kScanThreads}, {cb, kChunk}};
}

// Launch 1, thread i of chunk c (a = c * kChunk + i < A): the rank of assignment a among the
// chunk's assignments to its expert (those before it), and, when a is its expert's last in the
// chunk, that expert's count in the chunk into hist[c * E + e]. `chunk_idx` is the chunk's
// expert ids (the kernel stages them in shared memory), `n` its length.
MB_HD inline void rank_in_chunk(int32_t* slot, int32_t* hist, const int32_t* chunk_idx, int n, int i, int64_t a,
                                int64_t c, int E) {
  const int32_t e = chunk_idx[i];
  int32_t r = 0;
  bool last = true;
  for (int j = 0; j < n; ++j) {
    if (chunk_idx[j] != e) continue;
    if (j < i) ++r;
    if (j > i) last = false;
  }
  slot[a] = r;
  if (last) hist[c * E + e] = r + 1;
}

// Launch 2, expert e: base[c * E + e] = its assignments in the chunks before c; routed[e] =
// all of them; prob_sum[e] = the sum of its router probabilities over the tokens, in order.
template <typename S>
MB_HD inline void scan_expert(int32_t* base, int32_t* routed, S* prob_sum, const int32_t* hist, const S* probs,
                              int64_t chunks, int N, int E, int e) {
  int32_t run = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    base[c * E + e] = run;
    run += hist[c * E + e];
  }
  routed[e] = run;
  S s = 0;
  for (int n = 0; n < N; ++n) s += probs[int64_t(n) * E + e];
  prob_sum[e] = s;
}

// Launch 3: the experts each of the kScanThreads threads owns, [lo, hi).
MB_HD inline void scan_run(int t, int E, int& lo, int& hi) {
  const int per = (E + kScanThreads - 1) / kScanThreads;
  lo = t * per < E ? t * per : E;
  hi = lo + per < E ? lo + per : E;
}
MB_HD inline int32_t kept(int32_t routed, int capacity) {
  return capacity > 0 && routed > capacity ? capacity : routed;
}
// Launch 3, thread t, first half: its run's total of kept rows.
MB_HD inline int32_t run_total(const int32_t* routed, int E, int capacity, int t) {
  int lo, hi;
  scan_run(t, E, lo, hi);
  int32_t s = 0;
  for (int e = lo; e < hi; ++e) s += kept(routed[e], capacity);
  return s;
}
// Launch 3, thread t, second half: given `before` (the exclusive scan of the runs' totals at
// t), the offsets of its experts; thread 0 also writes offsets[E], the rows kept in all.
MB_HD inline void run_offsets(int32_t* offsets, const int32_t* routed, int E, int capacity, int t, int32_t before,
                              int32_t total) {
  int lo, hi;
  scan_run(t, E, lo, hi);
  for (int e = lo; e < hi; ++e) {
    offsets[e] = before;
    before += kept(routed[e], capacity);
  }
  if (t == 0) offsets[E] = total;
}

// Launch 4, assignment a of chunk c: its row among the expert's kept rows, or -1.
MB_HD inline void place(int32_t* slot, const int32_t* idx, const int32_t* base, const int32_t* offsets, int64_t a,
                        int64_t c, int E) {
  const int32_t e = idx[a];
  const int32_t r = base[c * E + e] + slot[a];
  slot[a] = r < offsets[e + 1] - offsets[e] ? offsets[e] + r : -1;
}

}  // namespace meshbench::parallel::moe_plan_blocks
