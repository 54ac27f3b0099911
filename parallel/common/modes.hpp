// The modes a plan chooses among, as enums with their names: light enough for every layer
// (and for the CUDA sources, built as C++17) to include without the plan itself.
#pragma once

#include <string>

namespace meshbench::parallel {

enum class GradReduce { kAvg, kSum };                       // --grad-reduce: mean or sum over dp x cp
enum class Progress { kPoll, kThread };                     // who drives MPI's non-blocking reductions
enum class CpAlgo { kRing, kAllGather, kUlysses };          // --cp-algo
const char* cp_algo_name(CpAlgo a);                         // "ring", "allgather", "ulysses"
enum class PipeSchedule { kGpipe, k1F1B, kInterleaved };    // --schedule
PipeSchedule parse_pipe_schedule(const std::string& name);  // gpipe | 1f1b | interleaved
const char* name(PipeSchedule kind);

}  // namespace meshbench::parallel
