// The set-up of a parallel step on one rank (docs/architecture.md "The parallel step": plan -> groups ->
// sharded model -> strategies -> schedule): the communicators of every dimension the plan
// uses (recording, watched with --op-timeout), the model built with this rank's tensor,
// context, expert and pipeline place, the data-parallel or ZeRO strategy, and the action list.
// Not here: running the steps (executor), what is reported (step_bench, metrics, step_h5).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "comm/mesh.hpp"
#include "comm/mesh_comm.hpp"
#include "comm/topology.hpp"
#include "core/op_watch.hpp"
#include "data_parallel/data_parallel.hpp"
#include "executor/executor.hpp"
#include "kernels/comm_group.hpp"
#include "model/model.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "predict/costs.hpp"
#include "predict/replay.hpp"
#include "results/record.hpp"
#include "step/options.hpp"
#include "common/plan.hpp"
#include "common/trace.hpp"
#include "zero/zero.hpp"

namespace meshbench::parallel {

// Everything a rank runs the step with: groups, the dp communicator, the model, the strategy.
struct Setup {
  const Plan* plan = nullptr;
  meshbench::core::OpWatch* watch = nullptr;  // --op-timeout: every call of the step is watched
  std::unique_ptr<meshbench::comm::RankGrid> grid;
  std::unique_ptr<meshbench::comm::MeshComms> comms;
  Trace trace;
  std::unique_ptr<RecordingComm> dp_comm, tp_comm, cp_comm, ep_comm, etp_comm, edp_comm;
  std::unique_ptr<CommGroup<float>> tp, cp, ep, etp;  // tensor, context, expert (tensor) parallel (degree > 1)
  std::unique_ptr<RecordingComm> pp_comm, embedding_comm;  // pipeline parallel
  std::optional<PipeEnv> pipe;
  std::unique_ptr<Gpt<float>> model;     // null under --compute modelled
  std::unique_ptr<Costs> costs;           // --compute modelled: the durations (--predict FILE)
  std::unique_ptr<Replay> replay;         // --compute modelled: the action list with real calls
  std::unique_ptr<GradSync<float>> sync;  // DataParallel or Zero; null at dp x cp = 1
  DataParallel<float>* dp = nullptr;      // the plain data-parallel one, for its buckets
  Zero<float>* zero = nullptr;
  int dp_rank = 0;
  std::vector<Action> actions;
  double comm_setup_s = 0;  // seconds this rank spent creating its communicators (split + backend)
};

// Builds everything for world rank `rank` of the plan on backend `be` (GPU `device` for NCCL).
void make_setup(Setup& st, const Options& o, const Plan& plan, int rank, Backend<float>& be, int device);

// --compute modelled (predict/replay.hpp): the same groups and action list, no model; every
// compute action a wait of its duration from `costs`.
void make_modelled_setup(Setup& st, const Options& o, const Plan& plan, int rank, std::unique_ptr<Costs> costs);

// The groups of every dimension this run uses, with their node spans (HDF5 topology/groups).
std::vector<meshbench::results::GroupInfo> describe_groups(const Setup& st, const meshbench::comm::Topology& topo);

}  // namespace meshbench::parallel
