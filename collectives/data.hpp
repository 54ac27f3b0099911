// Element encoding and result checking for the collective benchmarks. Values are small
// integers carried in doubles; encode() writes them in any dtype (integers wrap modulo
// 2^bits, as the hardware does), so expected results compare bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "spec.hpp"

namespace meshbench::collectives {

void encode(comm::DType t, double v, void* dst);
double decode(comm::DType t, const void* src);

// Fills `dst` (count elements) with rank's inputs, starting at input element `first`.
void fill_inputs(const Inputs& in, int rank, std::byte* dst, std::size_t first, std::size_t count);
// Fills `dst` with a value no check expects, so an untouched element is caught.
void fill_sentinel(comm::DType t, std::byte* dst, std::size_t count);

// Elements of `got` (rank's receive window) that differ from the spec's expectation:
// bit-exact where every reduction order gives the same bits, else within a tolerance
// (avg, and 16-bit floats summed over many ranks).
std::uint64_t count_wrong(const Spec& spec, const Inputs& in, int rank, const std::byte* got, std::size_t count);

}  // namespace meshbench::collectives
