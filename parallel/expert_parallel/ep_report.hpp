// Expert parallel's accounting in step_bench (issue 13): the analytic bytes of the EP
// exchanges from the routing counts the run actually exchanged, and the per-rank imbalance
// picture (rows received, expert compute, dispatch, combine and counts-exchange time, the
// worst rank against the mean) for the console and the HDF5 step attributes.
// Not here: the exchanges themselves (engine/moe.cpp), the comparison with the trace (report.cpp).
#pragma once

#include <mpi.h>

#include <vector>

#include "vocab/config.hpp"
#include "core/log.hpp"
#include "vocab/grad_sync.hpp"
#include "expert_parallel/expert_parallel.hpp"
#include "report/step_h5.hpp"

namespace meshbench::parallel {

// Per rank (gathered to rank 0): rows received by its experts, expert, dispatch, combine and
// counts seconds per step; then worst/mean. Console and HDF5 (ep_* step attributes; the
// per-rank values as JSON lists). Collective over `world`.
void report_ep(const EpTotals& mine, int ep, int steps, StepH5* h5, const core::Log& out, MPI_Comm world);

}  // namespace meshbench::parallel
