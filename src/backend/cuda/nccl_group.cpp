#include "backend/cuda/nccl_group.h"

#include "backend/cuda/cuda_backend_impl.h"

#include <set>
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
