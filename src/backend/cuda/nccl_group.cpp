#include "backend/cuda/nccl_group.h"

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/log.h"

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#ifdef EMBER_HAVE_NCCL
#include <nccl.h>
#endif

namespace ember {

#ifdef EMBER_HAVE_NCCL

namespace cuda {

Status nccl_all_reduce_sum_f32(void* comm, const float* in, float* out, size_t n, cudaStream_t stream) {
  const ncclResult_t r = ncclAllReduce(in, out, n, ncclFloat32, ncclSum, static_cast<ncclComm_t>(comm), stream);
  if (r != ncclSuccess) return Status::errorf("NCCL all-reduce of {} floats: {}", n, ncclGetErrorString(r));
  return Status::ok();
}

void nccl_comm_destroy(void* comm) { ncclCommDestroy(static_cast<ncclComm_t>(comm)); }

}  // namespace cuda

namespace {

// The peer-to-peer all-reduce (p2p_allreduce.cuh) where every pair of GPUs can reach each
// other's memory: peer access on, each rank's slots / flags / counters in its own memory.
// Leaves the calling thread's device as it found it. EMBER_CUDA_P2P_ALLREDUCE=0: off.
Status setup_p2p(const std::vector<cuda::CudaBackend*>& backends, const std::vector<int>& devices) {
  const char* env = std::getenv("EMBER_CUDA_P2P_ALLREDUCE");
  if (env && std::string(env) == "0") return Status::error("EMBER_CUDA_P2P_ALLREDUCE=0");
  const int n = static_cast<int>(devices.size());
  if (n > cuda::kP2pMaxRanks) return Status::errorf("more than {} GPUs", cuda::kP2pMaxRanks);
  for (int a : devices)
    for (int b : devices) {
      int ok = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess || !ok))
        return Status::errorf("GPU {} cannot access GPU {}'s memory", a, b);
    }
  int current = 0;
  EMBER_CUDA_TRY(cudaGetDevice(&current));
  struct Restore {
    int d;
    ~Restore() { cudaSetDevice(d); }
  } restore{current};
  const size_t slot_bytes = sizeof(float) * 2 * static_cast<size_t>(n) * cuda::kP2pMaxElems;
  const size_t flag_bytes = sizeof(uint32_t) * static_cast<size_t>(cuda::kP2pMaxBlocks) * n;
  const size_t epoch_bytes = sizeof(uint32_t) * cuda::kP2pMaxBlocks;
  std::vector<cuda::P2pRank> ranks(static_cast<size_t>(n));
  std::vector<std::vector<void*>> owned(static_cast<size_t>(n));
  auto free_all = [&] {
    for (auto& o : owned)
      for (void* p : o) cudaFree(p);
  };
  for (int r = 0; r < n; ++r) {
    EMBER_CUDA_TRY(cudaSetDevice(devices[static_cast<size_t>(r)]));
    for (int q : devices) {
      if (q == devices[static_cast<size_t>(r)]) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(q, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
        free_all();
        return Status::errorf("peer access from GPU {} to {}: {}", devices[static_cast<size_t>(r)], q,
                              cudaGetErrorString(e));
      }
      (void)cudaGetLastError();  // (an already-enabled pair leaves its error set)
    }
    void *slots = nullptr, *flags = nullptr, *epochs = nullptr;
    if (cudaMalloc(&slots, slot_bytes) != cudaSuccess || cudaMalloc(&flags, flag_bytes) != cudaSuccess ||
        cudaMalloc(&epochs, epoch_bytes) != cudaSuccess) {
      for (void* p : {slots, flags, epochs})
        if (p) cudaFree(p);
      free_all();
      return Status::error("cannot allocate the peer-to-peer all-reduce buffers");
    }
    owned[static_cast<size_t>(r)] = {slots, flags, epochs};
    EMBER_CUDA_TRY(cudaMemset(flags, 0, flag_bytes));
    EMBER_CUDA_TRY(cudaMemset(epochs, 0, epoch_bytes));
    EMBER_CUDA_TRY(cudaDeviceSynchronize());  // (the backends' streams do not wait for the legacy stream)
  }
  for (int r = 0; r < n; ++r) {
    cuda::P2pRank& p = ranks[static_cast<size_t>(r)];
    p.rank = r;
    p.n_ranks = n;
    for (int q = 0; q < n; ++q) {
      p.slots[q] = static_cast<float*>(owned[static_cast<size_t>(q)][0]);
      p.flags[q] = static_cast<uint32_t*>(owned[static_cast<size_t>(q)][1]);
    }
    p.epochs = static_cast<uint32_t*>(owned[static_cast<size_t>(r)][2]);
  }
  for (int r = 0; r < n; ++r) backends[static_cast<size_t>(r)]->set_p2p(ranks[static_cast<size_t>(r)], owned[static_cast<size_t>(r)]);
  return Status::ok();
}

}  // namespace

Status join_cuda_tensor_parallel(const std::vector<Backend*>& ranks) {
  std::vector<cuda::CudaBackend*> backends;
  std::vector<int> devices;
  for (Backend* b : ranks) {
    auto* cb = dynamic_cast<cuda::CudaBackend*>(b);
    if (cb == nullptr) return Status::error("tensor parallel: every rank needs a CUDA backend");
    backends.push_back(cb);
    devices.push_back(cb->device_index());
  }
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size())
    return Status::error("tensor parallel: two ranks on one GPU");
  std::vector<ncclComm_t> comms(ranks.size());
  const ncclResult_t r = ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), devices.data());
  if (r != ncclSuccess)
    return Status::errorf("tensor parallel: NCCL initialization over {} GPUs failed: {}", comms.size(),
                          ncclGetErrorString(r));
  for (size_t i = 0; i < backends.size(); ++i) backends[i]->set_nccl_comm(comms[i]);
  const Status p2p = setup_p2p(backends, devices);
  int version = 0;
  ncclGetVersion(&version);
  EMBER_LOG_INFO("tensor parallel: {} GPUs, NCCL {}; all-reduces of up to {} floats {}", devices.size(), version,
                 cuda::kP2pMaxElems, p2p.is_ok() ? "peer to peer" : "by NCCL too (" + p2p.message() + ")");
  return Status::ok();
}

#else

namespace cuda {

Status nccl_all_reduce_sum_f32(void*, const float*, float*, size_t, cudaStream_t) {
  return Status::error("this ember was built without NCCL");
}

void nccl_comm_destroy(void*) {}

}  // namespace cuda

Status join_cuda_tensor_parallel(const std::vector<Backend*>&) {
  return Status::error("tensor parallel on CUDA needs NCCL: this ember was built without it");
}

#endif

}  // namespace ember
