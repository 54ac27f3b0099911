#include "step/setup.hpp"

#include <algorithm>
#include <string>

#include "comm/communicator.hpp"
#include "comm/watched_comm.hpp"
#include "core/routing.hpp"
#include "core/timer.hpp"
#include "pipeline_parallel/plan.hpp"
#include "predict/op_list.hpp"

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

namespace {

using meshbench::comm::GroupKind;

// This rank's index in its group of `kind` (0 where it is in none).
int index_in(const Setup& st, GroupKind kind, int rank) {
  const auto m = st.grid->membership(kind, rank);
  return m ? m->index : 0;
}

// The model's options from the plan: this rank's pipeline stage, tensor, context and expert
// place, and ZeRO's sharding of the state.
GptOptions model_options(const Setup& st, const Plan& plan, int rank) {
  const int d = plan.degrees.dp * plan.degrees.cp, P = plan.degrees.pp;
  // ZeRO with expert parallel shards the experts over edp apart from the rest (expert segments)
  const int edp = plan.experts_placed() ? plan.degrees.edp : 0;
  GptOptions mo = plan.zero > 0 ? zero_model_options(plan.zero, d, edp) : GptOptions{};
  const int pp_rank = index_in(st, GroupKind::kPp, rank);
  if (P > 1)  // this rank's stage: its chunks' layers, the embeddings first, the head last
    mo.stage = StageSpec{stage_chunks(plan, pp_rank), pp_rank == 0, pp_rank == P - 1, plan.micro_batches};
  if (plan.degrees.tp > 1)
    mo.tp = TpSpec{plan.degrees.tp, index_in(st, GroupKind::kTp, rank), TpMode{plan.sp, plan.sp_regather, plan.overlap}};
  if (plan.degrees.cp > 1)
    mo.cp = CpSpec{plan.degrees.cp, index_in(st, GroupKind::kCp, rank), plan.cp_algo, plan.cp_zigzag, plan.overlap};
  if (plan.experts_placed())
    mo.ep = EpSpec{plan.degrees.ep, index_in(st, GroupKind::kEp, rank), plan.degrees.etp, index_in(st, GroupKind::kEtp, rank)};
  mo.flash = plan.flash;
  mo.recompute_attention = plan.recompute == "selective";
  mo.recompute_blocks = plan.recompute_blocks();
  return mo;
}

// The plan's communicators, in one order on every rank, since each split is collective over
// the world: tp, cp, ep, etp, edp, dp x cp, pp, embedding. The run's set-up and the modelled
// one both create their groups here; `device` -1: host buffers (the modelled run).
void make_groups(Setup& st, const Options& o, const Plan& plan, int rank, int device) {
  const meshbench::comm::Degrees& d = plan.degrees;
  if (d.tp > 1) st.tp_comm = group_comm(st, o, GroupKind::kTp, "tp", rank, device);
  if (d.cp > 1) st.cp_comm = group_comm(st, o, GroupKind::kCp, "cp", rank, device);
  if (plan.experts_placed()) {
    if (d.ep > 1) st.ep_comm = group_comm(st, o, GroupKind::kEp, "ep", rank, device);
    if (d.etp > 1) st.etp_comm = group_comm(st, o, GroupKind::kEtp, "etp", rank, device);
    // ZeRO shards the experts over edp, a group of one included (its calls cost nothing)
    if (d.edp > 1 || plan.zero > 0) st.edp_comm = group_comm(st, o, GroupKind::kEdp, "edp", rank, device);
  }
  if (d.dp * d.cp > 1 || plan.zero > 0) st.dp_comm = group_comm(st, o, GroupKind::kDpCp, "dp", rank, device);
  if (d.pp > 1) {
    st.pp_comm = group_comm(st, o, GroupKind::kPp, "pp", rank, device);
    // the tied embedding's two copies (first and last stage) sum their gradients
    if (plan.model.tied) st.embedding_comm = group_comm(st, o, GroupKind::kEmbedding, "embedding", rank, device);
  }
}

// Tensor parallel (with sequence parallel): the tp group's communicator in the model's layers.
void apply_tensor_parallel(Setup& st, Backend<float>& be) {
  st.tp = std::make_unique<CommGroup<float>>(*st.tp_comm, be, &st.trace.tags);
  st.model->set_tp_comm(st.tp.get());
}

// Context parallel (ring or Ulysses attention over the cp group).
void apply_context_parallel(Setup& st, Backend<float>& be) {
  st.cp = std::make_unique<CommGroup<float>>(*st.cp_comm, be, &st.trace.tags);
  st.model->set_cp_comm(st.cp.get());
}

// Expert parallel: the MoE exchanges over the ep group (expert tensor parallel: the gathers
// and reduce-scatters over the etp group); the experts' gradients reduce over
// edp (the ranks holding the same experts), not dp; ZeRO shards them over it (a group of one
// included: its calls cost nothing).
ExpertGrads apply_expert_parallel(Setup& st, const Plan& plan, Backend<float>& be) {
  if (st.ep_comm) {
    st.ep = std::make_unique<CommGroup<float>>(*st.ep_comm, be, &st.trace.tags);
    st.model->set_ep_comm(st.ep.get());
  }
  if (st.etp_comm) {
    st.etp = std::make_unique<CommGroup<float>>(*st.etp_comm, be, &st.trace.tags);
    st.model->set_etp_comm(st.etp.get());
  }
  return ExpertGrads{st.edp_comm.get(), moe_expert_ranges(st.model->layout(), plan.model)};
}

// Data parallel or ZeRO over the dp x cp group: the gradient reduction and the optimizer.
void apply_data_parallel(Setup& st, const Options& o, const Plan& plan, int rank, const ExpertGrads& experts) {
  if (plan.zero > 0) {
    comm::Communicator* edp = plan.experts_placed() ? st.edp_comm.get() : nullptr;
    auto z = std::make_unique<Zero<float>>(*st.model, *st.dp_comm, edp, plan, &st.trace.tags, o.seed);
    st.zero = z.get();
    st.sync = std::move(z);
  } else {
    auto dp = std::make_unique<DataParallel<float>>(*st.model, *st.dp_comm, plan, &st.trace.tags, experts);
    st.dp = dp.get();
    st.sync = std::move(dp);
  }
  if (o.inject_fault == rank) st.sync->inject_fault(1.0);
}

// Pipeline parallel: the pp group's point-to-point, the tied embedding's group, and this
// stage's schedule.
void apply_pipeline_parallel(Setup& st, const Plan& plan, int rank) {
  const int pp_rank = index_in(st, GroupKind::kPp, rank);
  st.pipe = PipeEnv{st.pp_comm.get(), st.embedding_comm.get(), plan.degrees.pp, pp_rank, plan.vpp};
  st.actions = rank_actions(plan, pp_rank);  // the step model walks the same list (predict/op_list.hpp)
}

}  // namespace

void make_setup(Setup& st, const Options& o, const Plan& plan, int rank, Backend<float>& be, int device) {
  st.plan = &plan;
  st.grid = std::make_unique<meshbench::comm::RankGrid>(plan.world, plan.mesh, plan.order);
  st.comms = std::make_unique<meshbench::comm::MeshComms>(MPI_COMM_WORLD, *st.grid);
  st.model = std::make_unique<Gpt<float>>(plan.model, be, model_options(st, plan, rank));
  st.model->moe().set_assignment(routing_assignment(plan, o.seed));
  st.model->init_weights(o.seed);  // every rank: its slice of the full canonical weights (ZeRO-3: its shard)
  make_groups(st, o, plan, rank, device);
  const meshbench::comm::Degrees& d = plan.degrees;
  if (d.tp > 1) apply_tensor_parallel(st, be);
  if (d.cp > 1) apply_context_parallel(st, be);
  const ExpertGrads experts = plan.experts_placed() ? apply_expert_parallel(st, plan, be) : ExpertGrads{};
  st.dp_rank = index_in(st, GroupKind::kDp, rank);  // a rank's data: its dp index's samples (cp ranks share them)
  if (d.dp * d.cp > 1 || plan.zero > 0) apply_data_parallel(st, o, plan, rank, experts);
  st.actions = rank_actions(plan, 0);
  if (d.pp > 1) apply_pipeline_parallel(st, plan, rank);
}

void make_modelled_setup(Setup& st, const Options& o, const Plan& plan, int rank, std::unique_ptr<Costs> costs) {
  st.plan = &plan;
  st.grid = std::make_unique<meshbench::comm::RankGrid>(plan.world, plan.mesh, plan.order);
  st.comms = std::make_unique<meshbench::comm::MeshComms>(MPI_COMM_WORLD, *st.grid);
  make_groups(st, o, plan, rank, -1);
  st.dp_rank = index_in(st, GroupKind::kDp, rank);
  const int pp_rank = index_in(st, GroupKind::kPp, rank);
  st.actions = rank_actions(plan, pp_rank);
  if (plan.degrees.pp > 1) st.pipe = PipeEnv{st.pp_comm.get(), st.embedding_comm.get(), plan.degrees.pp, pp_rank, plan.vpp};
  st.costs = std::move(costs);
  ReplayComms rc{st.dp_comm.get(), st.tp_comm.get(), st.cp_comm.get(), st.ep_comm.get(), st.edp_comm.get(),
                 st.pipe ? &*st.pipe : nullptr, st.etp_comm.get()};
  st.replay = std::make_unique<Replay>(plan, *st.costs, rc, pp_rank, index_in(st, GroupKind::kEp, rank), st.trace);
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
  if (st.dp_comm) add(meshbench::comm::GroupKind::kDpCp, "dp");
  if (st.tp_comm) add(meshbench::comm::GroupKind::kTp, "tp");
  if (st.cp_comm) add(meshbench::comm::GroupKind::kCp, "cp");
  if (st.ep_comm) add(meshbench::comm::GroupKind::kEp, "ep");
  if (st.etp_comm) add(meshbench::comm::GroupKind::kEtp, "etp");
  if (st.edp_comm) add(meshbench::comm::GroupKind::kEdp, "edp");
  if (st.pipe) add(meshbench::comm::GroupKind::kPp, "pp");
  if (st.pipe && st.plan->model.tied) add(meshbench::comm::GroupKind::kEmbedding, "embedding");  // every rank: collective
  return g;
}

}  // namespace meshbench::parallel
