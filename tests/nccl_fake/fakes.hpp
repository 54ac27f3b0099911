// The fakes of nccl_order_test.cpp: the recorded calls (Call, FakeWorld g) and a definition of
// every CUDA runtime, NCCL and MPI function that src/comm/nccl_comm.cu and
// src/compute/device_cuda.cu call, each recording its call (the link-time seam the test's
// header describes). Included once, by nccl_order_test.cpp, after the code under test: the
// definitions have external linkage and take the place of libcudart's, libnccl's and libmpi's.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace {

struct Call {
  std::string fn;
  const void* a = nullptr;  // send buffer / copy source / event
  const void* b = nullptr;  // recv buffer / copy destination
  std::size_t count = 0;
  int peer = -1;            // peer, root
  const void* stream = nullptr;
};

struct FakeWorld {
  int rank = 0, size = 1;
  std::vector<Call> calls;
  // Scripted device times of events (ms since an arbitrary origin): cudaEventElapsedTime of two
  // scripted events is their difference; otherwise 8 ms.
  std::map<const void*, float> event_ms;
  std::uintptr_t next_handle = 0x1000;
  void* handle() { return reinterpret_cast<void*>(next_handle += 0x10); }
  void record(Call c) { calls.push_back(std::move(c)); }
  void clear() { calls.clear(); }
};
FakeWorld g;

}  // namespace

// ---- fakes: CUDA runtime ----------------------------------------------------------------
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  *s = static_cast<cudaStream_t>(g.handle());
  g.record({flags == cudaStreamNonBlocking ? "streamCreateNonBlocking" : "streamCreate", nullptr, nullptr, 0, -1, *s});
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  g.record({"streamSynchronize", nullptr, nullptr, 0, -1, s});
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  g.record({"streamWaitEvent", e, nullptr, 0, -1, s});
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = static_cast<cudaEvent_t>(g.handle());
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  g.record({"eventRecord", e, nullptr, 0, -1, s});
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  g.record({"eventQuery", e});
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  g.record({"eventSynchronize", e});
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  const auto ia = g.event_ms.find(a), ib = g.event_ms.find(b);
  *ms = ia != g.event_ms.end() && ib != g.event_ms.end() ? ib->second - ia->second : 8.0f;
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  g.record({"beginCapture", nullptr, nullptr, 0, -1, s});
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  *graph = static_cast<cudaGraph_t>(g.handle());
  g.record({"endCapture", *graph, nullptr, 0, -1, s});
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = static_cast<cudaGraphExec_t>(g.handle());
  g.record({"graphInstantiate", graph, *exec});
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  g.record({"graphLaunch", exec, nullptr, 0, -1, s});
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t) { return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
  g.record({kind == cudaMemcpyHostToDevice ? "memcpyH2D" : "memcpyD2H", src, dst, n, -1, s});
  return cudaSuccess;
}

// ---- fakes: NCCL --------------------------------------------------------------------------
ncclResult_t ncclGetUniqueId(ncclUniqueId*) { return ncclSuccess; }
ncclResult_t ncclCommInitRank(ncclComm_t* c, int, ncclUniqueId, int) {
  *c = static_cast<ncclComm_t>(g.handle());
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclSuccess; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* r) {
  *r = ncclSuccess;
  g.record({"commGetAsyncError"});
  return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t st) {
  g.record({"allReduce", s, r, n, -1, st});
  return ncclSuccess;
}
ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t, ncclComm_t, cudaStream_t st) {
  g.record({"allGather", s, r, n, -1, st});
  return ncclSuccess;
}
ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                               cudaStream_t st) {
  g.record({"reduceScatter", s, r, n, -1, st});
  return ncclSuccess;
}
ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t, int root, ncclComm_t, cudaStream_t st) {
  g.record({"broadcast", s, r, n, root, st});
  return ncclSuccess;
}
ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t, int peer, ncclComm_t, cudaStream_t st) {
  g.record({"send", s, nullptr, n, peer, st});
  return ncclSuccess;
}
ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t, int peer, ncclComm_t, cudaStream_t st) {
  g.record({"recv", nullptr, r, n, peer, st});
  return ncclSuccess;
}
ncclResult_t ncclGroupStart() {
  g.record({"groupStart"});
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  g.record({"groupEnd"});
  return ncclSuccess;
}
ncclResult_t ncclGetVersion(int* v) {
  *v = 22809;
  return ncclSuccess;
}

// ---- fakes: the MPI calls of the communicator's set-up and barrier -------------------------
int MPI_Comm_rank(MPI_Comm, int* r) {
  *r = g.rank;
  return MPI_SUCCESS;
}
int MPI_Comm_size(MPI_Comm, int* s) {
  *s = g.size;
  return MPI_SUCCESS;
}
int MPI_Bcast(void*, int, MPI_Datatype, int, MPI_Comm) { return MPI_SUCCESS; }
int MPI_Barrier(MPI_Comm) {
  g.record({"mpiBarrier"});
  return MPI_SUCCESS;
}
