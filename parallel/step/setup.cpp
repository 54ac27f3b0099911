#include "step/setup.hpp"

#include <algorithm>
#include <string>

#include "comm/communicator.hpp"
#include "comm/watched_comm.hpp"
#include "core/routing.hpp"
#include "core/timer.hpp"
#include "pipeline_parallel/pipeline_parallel.hpp"
#include "step/rules.hpp"

namespace meshbench::parallel {


// A recording communicator over this rank's group of `kind` (MPI or NCCL, watched when --op-timeout);
// null where the rank is in no such group (middle stages for the embedding group).
namespace {

std::unique_ptr<RecordingComm> group_comm(Setup& st, const Options& o, meshbench::comm::GroupKind kind, const char* dim,
                                          int rank, int device) {
  const auto mem = st.grid->membership(kind, rank);
  const double t0 = meshbench::core::now_seconds();
  MPI_Comm c = st.comms->get(kind);  // MPI_Comm_split on first use (collective)
  if (c == MPI_COMM_NULL) {
    st.comm_setup_s += meshbench::core::now_seconds() - t0;
    return nullptr;
  }
  std::unique_ptr<meshbench::comm::Communicator> inner =
      o.backend == "nccl" ? meshbench::comm::make_nccl_communicator(c, dim, device) : meshbench::comm::make_mpi_communicator(c, dim);
  st.comm_setup_s += meshbench::core::now_seconds() - t0;
  if (st.watch) inner = meshbench::comm::make_watched(std::move(inner), *st.watch);
  return std::make_unique<RecordingComm>(std::move(inner), st.trace, dim, mem ? mem->group : 0);
}

// --routing: a fixed token-to-expert assignment (core/routing.hpp) in place of the router's
// top-k, or none for learned. The token shard is named by its ids (an FNV-1a hash), so the
// single-rank reference and every layout route the same micro-batch the same way.
MoeMlp<float>::Assignment routing_assignment(const Plan& plan, uint64_t seed) {
  if (plan.routing.mode == meshbench::core::RoutingMode::kLearned) return {};
  const meshbench::core::Routing r = plan.routing;
  const int64_t N = plan.model.tokens();
  const int E = plan.model.experts, k = plan.model.top_k, ep = plan.degrees.ep;
  return [=](int layer, const int32_t* tokens, int step, int32_t* idx) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < N; ++i) h = (h ^ static_cast<uint32_t>(tokens[i])) * 1099511628211ull;
    const meshbench::core::RoutingShape s{seed + 7919ull * static_cast<uint64_t>(layer), std::max(step, 0),
                                   static_cast<int>(h % 1000003), static_cast<size_t>(N), E, k, ep};
    const std::vector<int> a = meshbench::core::assign_experts(r, s);
    std::copy(a.begin(), a.end(), idx);
  };
}

}  // namespace

void make_setup(Setup& st, const Options& o, const Plan& plan, int rank, Backend<float>& be, int device) {
  st.plan = &plan;
  st.grid = std::make_unique<meshbench::comm::RankGrid>(plan.world, plan.mesh, plan.order);
  st.comms = std::make_unique<meshbench::comm::MeshComms>(MPI_COMM_WORLD, *st.grid);
  const int d = plan.degrees.dp * plan.degrees.cp, P = plan.degrees.pp;
  GptOptions mo = plan.zero > 0 ? zero_model_options(plan.zero, d) : GptOptions{};
  const auto pmem = st.grid->membership(meshbench::comm::GroupKind::kPp, rank);
  const int pp_rank = pmem ? pmem->index : 0;
  if (P > 1)  // this rank's stage: its chunks' layers, the embeddings first, the head last
    mo.stage = StageSpec{stage_chunks(plan, pp_rank), pp_rank == 0, pp_rank == P - 1, plan.micro_batches};
  if (plan.degrees.tp > 1) {
    const auto tpm = st.grid->membership(meshbench::comm::GroupKind::kTp, rank);
    mo.tp.size = plan.degrees.tp;
    mo.tp.rank = tpm ? tpm->index : 0;
    mo.tp.mode = TpMode{plan.sp, plan.sp_regather, plan.overlap};
  }
  if (plan.degrees.cp > 1) {
    const auto cpm = st.grid->membership(meshbench::comm::GroupKind::kCp, rank);
    mo.cp = CpSpec{plan.degrees.cp, cpm ? cpm->index : 0, plan.cp_algo, plan.cp_zigzag, plan.overlap};
  }
  if (plan.degrees.ep > 1) {
    const auto epm = st.grid->membership(meshbench::comm::GroupKind::kEp, rank);
    mo.ep = EpSpec{plan.degrees.ep, epm ? epm->index : 0};
  }
  st.model = std::make_unique<Gpt<float>>(plan.model, be, mo);
  st.model->moe().set_assignment(routing_assignment(plan, o.seed));
  st.model->init_weights(o.seed);  // every rank: its slice of the full canonical weights (ZeRO-3: its shard)
  if (plan.degrees.tp > 1) {
    st.tp_comm = group_comm(st, o, meshbench::comm::GroupKind::kTp, "tp", rank, device);
    st.tp = std::make_unique<CommGroup<float>>(*st.tp_comm, be, &st.trace.tags);
    st.model->set_tp_comm(st.tp.get());
  }
  if (plan.degrees.cp > 1) {
    st.cp_comm = group_comm(st, o, meshbench::comm::GroupKind::kCp, "cp", rank, device);
    st.cp = std::make_unique<CommGroup<float>>(*st.cp_comm, be, &st.trace.tags);
    st.model->set_cp_comm(st.cp.get());
  }
  ExpertGrads experts;  // expert parallel: the experts' gradients reduce over edp, not dp
  if (plan.degrees.ep > 1) {
    st.ep_comm = group_comm(st, o, meshbench::comm::GroupKind::kEp, "ep", rank, device);
    st.ep = std::make_unique<CommGroup<float>>(*st.ep_comm, be, &st.trace.tags);
    st.model->set_ep_comm(st.ep.get());
    if (plan.degrees.edp > 1) st.edp_comm = group_comm(st, o, meshbench::comm::GroupKind::kEdp, "edp", rank, device);
    experts = ExpertGrads{st.edp_comm.get(), moe_expert_ranges(st.model->layout(), plan.model)};
  }
  // The data of a rank is its data-parallel index's samples (cp ranks share them).
  const auto mem = st.grid->membership(meshbench::comm::GroupKind::kDp, rank);
  st.dp_rank = mem ? mem->index : 0;
  if (d > 1 || plan.zero > 0) {
    st.dp_comm = group_comm(st, o, meshbench::comm::GroupKind::kDpCp, "dp", rank, device);
    if (plan.zero > 0) {
      auto z = std::make_unique<Zero<float>>(*st.model, *st.dp_comm, plan, &st.trace.tags, o.seed);
      st.zero = z.get();
      st.sync = std::move(z);
    } else {
      auto dp = std::make_unique<DataParallel<float>>(*st.model, *st.dp_comm, plan, &st.trace.tags, experts);
      st.dp = dp.get();
      st.sync = std::move(dp);
    }
    if (o.inject_fault == rank) st.sync->inject_fault(1.0);
  }
  st.actions = accumulation_schedule(plan.micro_batches);
  if (P > 1) {
    st.pp_comm = group_comm(st, o, meshbench::comm::GroupKind::kPp, "pp", rank, device);
    // The tied embedding's two copies (first and last stage) sum their gradients.
    if (plan.model.tied) st.embedding_comm = group_comm(st, o, meshbench::comm::GroupKind::kEmbedding, "embedding", rank, device);
    st.pipe = PipeEnv{st.pp_comm.get(), st.embedding_comm.get(), P, pp_rank, plan.vpp};
    st.actions = pipeline_schedule(plan.schedule, pipe_shape(plan), pp_rank);
  }
}

std::vector<meshbench::results::GroupInfo> describe_groups(const Setup& st, const meshbench::comm::Topology& topo) {
  std::vector<meshbench::results::GroupInfo> g;
  std::vector<int> all(static_cast<size_t>(st.grid->world()));
  for (int r = 0; r < st.grid->world(); ++r) all[static_cast<size_t>(r)] = r;
  g.push_back(meshbench::comm::describe_group("world", 0, all, topo));
  auto add = [&](meshbench::comm::GroupKind kind, const char* dim) {
    const auto& groups = st.grid->groups(kind);
    for (size_t i = 0; i < groups.size(); ++i) g.push_back(meshbench::comm::describe_group(dim, static_cast<int>(i), groups[i], topo));
  };
  if (st.sync) add(meshbench::comm::GroupKind::kDpCp, "dp");
  if (st.tp) add(meshbench::comm::GroupKind::kTp, "tp");
  if (st.cp) add(meshbench::comm::GroupKind::kCp, "cp");
  if (st.ep) add(meshbench::comm::GroupKind::kEp, "ep");
  if (st.pipe) add(meshbench::comm::GroupKind::kPp, "pp");
  if (st.pipe && st.model->config().tied) add(meshbench::comm::GroupKind::kEmbedding, "embedding");  // every rank: collective
  return g;
}

}  // namespace meshbench::parallel
