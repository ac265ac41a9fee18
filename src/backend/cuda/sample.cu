#include "backend/cuda/device_util.cuh"
#include "backend/cuda/sample.cuh"

#include <algorithm>
#include <climits>
#include <cmath>

namespace ember::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int64_t kArgmaxMaxSlices = 128;
constexpr int kArgmaxMaxSliceRows = 64;  // rows the scratch holds parts and tickets of

// (v, i) beats (bv, bi): larger value, or the same value at a lower index. Entries that were
// never set carry (-inf, INT_MAX), so they lose to any real candidate.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// Block-wide (value, index) reduction of each thread's (bv, bi); the winner lands in thread 0.
template <int kThreadsPerBlock>
__device__ __forceinline__ void block_best(float& bv, int& bi) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
    if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
  }
  constexpr int kW = kThreadsPerBlock / 32;
  __shared__ float sv[kW];
  __shared__ int si[kW];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
  __syncthreads();
  if (warp == 0) {
    bv = lane < kW ? sv[lane] : -INFINITY;
    bi = lane < kW ? si[lane] : INT_MAX;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
    }
  }
}

// Block (s, r) takes slice s of row r (gridDim.x slices of `chunk` elements, chunk % 4 == 0).
// Each thread scans its elements in ascending index order keeping the first strict maximum
// (NaN and -inf never compare greater than the -inf start), then the block reduces (value,
// index) pairs. With one slice the block writes out[r]; with more, each block leaves its best in
// part[r][s] and the row's last block to finish (a ticket in count[r], which it resets to 0 for
// the next launch) reduces them. Slices exist because one block reads a row at one SM's
// bandwidth: 10.4 us for the 513 KB of a 128k vocabulary, a batch-1 decode step's whole tail.
struct ArgmaxPart {
  float v;
  int i;
};
// Row r's pick (bi; INT_MAX where every value was NaN: id 0) into out and, if given, host_out.
__device__ __forceinline__ void store_pick(int32_t* out, int32_t* host_out, int r, int bi) {
  const int32_t id = bi == INT_MAX ? 0 : bi;
  out[r] = id;
  if (host_out) host_out[r] = id;
}

template <bool kVec4, int kT>
__global__ void __launch_bounds__(kT) argmax_rows_kernel(const float* __restrict__ x, int64_t vocab, int64_t chunk,
                                                         int32_t* __restrict__ out, int32_t* __restrict__ host_out,
                                                         ArgmaxPart* __restrict__ part,
                                                         unsigned int* __restrict__ count) {
  const int r = blockIdx.y, slices = gridDim.x;
  const float* row = x + static_cast<int64_t>(r) * vocab;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t c1 = c0 + chunk < vocab ? c0 + chunk : vocab;
  float bv = -INFINITY;
  int bi = INT_MAX;
  if constexpr (kVec4) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int64_t j = c0 / 4 + threadIdx.x; j < c1 / 4; j += kT) {
      const float4 v = __ldg(row4 + j);
      const int base = static_cast<int>(j * 4);
      if (v.x > bv) { bv = v.x; bi = base; }
      if (v.y > bv) { bv = v.y; bi = base + 1; }
      if (v.z > bv) { bv = v.z; bi = base + 2; }
      if (v.w > bv) { bv = v.w; bi = base + 3; }
    }
  } else {
    for (int64_t j = c0 + threadIdx.x; j < c1; j += kT) {
      const float v = __ldg(row + j);
      if (v > bv) { bv = v; bi = static_cast<int>(j); }
    }
  }
  block_best<kT>(bv, bi);
  if (slices == 1) {
    if (threadIdx.x == 0) store_pick(out, host_out, r, bi);
    return;
  }
  __shared__ bool last;
  if (threadIdx.x == 0) {
    part[static_cast<int64_t>(r) * slices + blockIdx.x] = ArgmaxPart{bv, bi};
    __threadfence();  // the part before the ticket
    last = atomicAdd(count + r, 1u) == static_cast<unsigned int>(slices - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // the ticket before the other blocks' parts
  bv = -INFINITY;
  bi = INT_MAX;
  for (int s = threadIdx.x; s < slices; s += kT) {
    // (L2, not a possibly stale L1 line: the other blocks wrote these)
    const float2 p = __ldcg(reinterpret_cast<const float2*>(part) + static_cast<int64_t>(r) * slices + s);
    const int pi = __float_as_int(p.y);
    if (better(p.x, pi, bv, bi)) { bv = p.x; bi = pi; }
  }
  block_best<kT>(bv, bi);
  if (threadIdx.x == 0) {
    store_pick(out, host_out, r, bi);
    count[r] = 0;
  }
}

// ---- Sampling (DeviceSampleRow). One 1024-thread block per row; every pass re-reads the row
// from global memory (L2 for small batches) and recomputes x the same way, so each pass sees
// the same values. All sums that decide anything are integers (fixed-point masses), so a row
// gives the same token for the same u on every run.
constexpr int kSThreads = 1024;
constexpr int kSWarps = kSThreads / 32;
constexpr float kFixScale = 17592186044416.0f;  // 2^44: mass units per exp(0)
using u64 = unsigned long long;

// Order-preserving map of floats (no NaN) to unsigned keys.
__device__ __forceinline__ uint32_t fkey(float f) {
  if (f == 0.0f) f = 0.0f;  // -0 == +0 for the host's comparisons
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ u64 warp_sum_u64(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

struct SampleShared {
  u64 hist[256];
  u64 wsum[kSWarps];
  float fval[kSWarps];
  int ival[kSWarps];
  double dval[kSWarps];
  u64 above;
  long long res;
  int sel;
};

// Fixed-order block reductions (the same result every run).
__device__ float block_max(float v, SampleShared& sh) { return cuda::block_max(v, sh.fval); }

__device__ u64 block_sum_u64(u64 v, SampleShared& sh) {
  v = warp_sum_u64(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sh.wsum[warp] = v;
  __syncthreads();
  u64 r = lane < kSWarps ? sh.wsum[lane] : 0;
  r = warp_sum_u64(r);
  __syncthreads();
  return r;
}

__device__ double block_sum_double(double v, SampleShared& sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sh.dval[warp] = v;
  __syncthreads();
  double r = lane < kSWarps ? sh.dval[lane] : 0.0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
  __syncthreads();
  return r;
}

// The block's best (bv, bi) of every thread's (value, index) by `better`; every thread gets it.
__device__ void block_best(float& bv, int& bi, SampleShared& sh) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
    if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) { sh.fval[warp] = bv; sh.ival[warp] = bi; }
  __syncthreads();
  bv = lane < kSWarps ? sh.fval[lane] : -INFINITY;
  bi = lane < kSWarps ? sh.ival[lane] : INT_MAX;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
    if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
  }
  __syncthreads();
}

// The index of the first maximum of f(i) (f never NaN); INT_MAX when nothing is above -inf.
template <class F>
__device__ int block_argmax(int64_t vocab, F f, SampleShared& sh) {
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int64_t i = threadIdx.x; i < vocab; i += kSThreads) {
    const float v = f(i);
    if (v > bv) { bv = v; bi = static_cast<int>(i); }
  }
  block_best(bv, bi, sh);
  return bi;
}

// compute_logprobs' top list: the k most likely (value descending, id ascending among ties;
// -inf values included, so k <= vocab entries always exist) of f (never NaN), with logprob
// value - lse. Round r is a block argmax over the ids after round r - 1's pick in that order
// (a strict total order, so no id is listed twice and none skipped); thread 0 writes.
template <class F>
__device__ void block_top(int64_t vocab, int k, double lse, F f, DeviceSampleTop* top, SampleShared& sh) {
  float pv = INFINITY;
  int pi = -1;
  for (int r = 0; r < k; ++r) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int64_t i = threadIdx.x; i < vocab; i += kSThreads) {
      const float v = f(i);
      const int ii = static_cast<int>(i);
      const bool after = r == 0 || v < pv || (v == pv && ii > pi);
      if (after && better(v, ii, bv, bi)) { bv = v; bi = ii; }
    }
    block_best(bv, bi, sh);
    if (threadIdx.x == 0) top[r] = {bi, static_cast<float>(static_cast<double>(bv) - lse)};
    pv = bv;
    pi = bi;
  }
}

// The key K with W(key > K) < need <= W(key >= K) over the elements elem(i, key, w) gives
// (w = 0: not counted), by 4 passes of 8-bit digits from the top; *above = W(key > K).
// need must be in [1, W(all)].
template <class E>
__device__ uint32_t radix_select(int64_t vocab, u64 need, E elem, SampleShared& sh, u64* above) {
  const int lane = threadIdx.x % 32;
  uint32_t prefix = 0, mask = 0;
  u64 ab = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kSThreads) sh.hist[b] = 0;
    __syncthreads();
    const int64_t n_iter = (vocab + kSThreads - 1) / kSThreads * kSThreads;  // warp-uniform trip count
    for (int64_t i = threadIdx.x; i < n_iter; i += kSThreads) {
      uint32_t key = 0;
      u64 w = 0;
      if (i < vocab) elem(i, key, w);
      if ((key & mask) != prefix) w = 0;
      const uint32_t bin = (key >> shift) & 255u;
      // Warp-aggregated: one shared atomic per distinct bin of the warp.
      unsigned active = __ballot_sync(0xffffffffu, w != 0);
      while (active) {
        const int leader = __ffs(active) - 1;
        const uint32_t lb = __shfl_sync(0xffffffffu, bin, leader);
        const bool mine = ((active >> lane) & 1u) && bin == lb;
        const unsigned grp = __ballot_sync(0xffffffffu, mine);
        const u64 sum = warp_sum_u64(mine ? w : 0);
        if (lane == leader) atomicAdd(&sh.hist[lb], sum);
        active &= ~grp;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      u64 cum = ab;
      int b = 255;
      for (; b > 0; --b) {
        if (cum + sh.hist[b] >= need) break;
        cum += sh.hist[b];
      }
      sh.sel = b;
      sh.above = cum;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh.sel) << shift;
    mask |= 255u << shift;
    ab = sh.above;
    __syncthreads();
  }
  *above = ab;
  return prefix;
}

// The first index (ascending) at which the running sum of w(i) exceeds target; -1 when the
// total is <= target. Each warp owns one contiguous chunk of the row.
template <class W>
__device__ long long find_first(int64_t vocab, u64 target, W w, SampleShared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t chunk = ((vocab + kSWarps - 1) / kSWarps + 31) / 32 * 32;
  const int64_t lo = warp * chunk, hi = min(vocab, lo + chunk);
  u64 s = 0;
  for (int64_t i = lo + lane; i < hi; i += 32) s += w(i);
  s = warp_sum_u64(s);
  if (lane == 0) sh.wsum[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    u64 cum = 0;
    int sel = -1;
    for (int k = 0; k < kSWarps; ++k) {
      if (cum + sh.wsum[k] > target) {
        sel = k;
        break;
      }
      cum += sh.wsum[k];
    }
    sh.sel = sel;
    sh.above = cum;
    sh.res = -1;
  }
  __syncthreads();
  if (warp == sh.sel) {
    u64 cum = sh.above;
    for (int64_t base = lo; base < hi; base += 32) {
      const int64_t i = base + lane;
      const u64 v = i < hi ? w(i) : 0;
      u64 inc = v;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const u64 t = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += t;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, cum + inc > target);
      if (hit) {
        if (lane == __ffs(hit) - 1) sh.res = i;
        break;
      }
      cum += __shfl_sync(0xffffffffu, inc, 31);
    }
  }
  __syncthreads();
  const long long r = sh.res;
  __syncthreads();
  return r;
}

// The host's adjust_logit (sample/token_adjust.h), one rounded float operation per step.
__device__ __forceinline__ float adjust_logit(float v, const DeviceSampleAdj& a, float repetition) {
  if (a.flags & kSampleAdjSuppress) v = -INFINITY;
  if (a.flags & kSampleAdjBias) v = __fadd_rn(v, a.bias);
  if (a.flags & kSampleAdjRepeat) v = v > 0.0f ? __fdiv_rn(v, repetition) : __fmul_rn(v, repetition);
  if (a.flags & kSampleAdjSubtract) v = __fsub_rn(v, a.subtract);
  return v;
}

// Dynamic shared memory of a launch with adjustments: for each 32-id word of the row, a bitmap
// word of the adjusted ids, then (words with a bit set only) the index of the word's first
// entry in the row's sorted list; id i's entry is first[w] + popc(bits[w] below i's bit).
extern __shared__ uint32_t adj_index_smem[];

__host__ __device__ inline int64_t adj_words(int64_t vocab) { return (vocab + 31) / 32; }

__global__ void __launch_bounds__(kSThreads) sample_rows_kernel(const float* __restrict__ x, int64_t vocab,
                                                                 const DeviceSampleRow* __restrict__ rows,
                                                                 const DeviceSampleAdj* __restrict__ adj,
                                                                 DeviceSampleOut* __restrict__ out,
                                                                 DeviceSampleTop* __restrict__ top) {
  __shared__ SampleShared sh;
  const DeviceSampleRow p = rows[blockIdx.x];
  const float* raw = x + static_cast<int64_t>(p.logits_row) * vocab;
  auto rawv = [&](int64_t i) {
    const float v = raw[i];
    return isnan(v) ? -INFINITY : v;
  };
  // The row's adjustments: index the ids (block-uniform branch; rows without any skip it).
  const int n_adj = p.n_adj;
  const DeviceSampleAdj* list = adj + p.adj_begin;
  const int64_t n_words = adj_words(vocab);
  uint32_t* adj_bits = adj_index_smem;
  int32_t* adj_first = reinterpret_cast<int32_t*>(adj_index_smem + n_words);
  if (n_adj > 0) {
    for (int64_t w = threadIdx.x; w < n_words; w += kSThreads) adj_bits[w] = 0;
    __syncthreads();
    for (int j = threadIdx.x; j < n_adj; j += kSThreads) {
      const int t = list[j].token;
      atomicOr(&adj_bits[t >> 5], 1u << (t & 31));
      if (j == 0 || (list[j - 1].token >> 5) != (t >> 5)) adj_first[t >> 5] = j;
    }
    __syncthreads();
  }
  // x before temperature: the raw row with the adjusted ids replaced.
  auto adjv = [&](int64_t i) {
    float v = rawv(i);
    if (n_adj > 0) {
      const uint32_t word = adj_bits[i >> 5], bit = 1u << (i & 31);
      if (word & bit) v = adjust_logit(v, list[adj_first[i >> 5] + __popc(word & (bit - 1))], p.repetition);
    }
    return v;
  };
  const float inv_t = p.inv_temperature;
  auto xv = [&](int64_t i) { return __fmul_rn(adjv(i), inv_t); };  // the host's x *= 1 / T
  // Nothing left above -inf (e.g. min_tokens over a vocabulary of stop tokens): the host
  // falls back to the raw argmax, 0 when there is none.
  auto raw_argmax = [&] {
    const int bi = block_argmax(vocab, rawv, sh);
    return bi == INT_MAX ? 0 : bi;
  };
  int token = 0;
  if (p.greedy) {
    const int bi = block_argmax(vocab, adjv, sh);
    token = bi == INT_MAX ? raw_argmax() : bi;
  } else {
    float tmax = -INFINITY;
    for (int64_t i = threadIdx.x; i < vocab; i += kSThreads) tmax = fmaxf(tmax, xv(i));
    const float m = block_max(tmax, sh);
    if (m == INFINITY) {
      const long long f = find_first(vocab, 0, [&](int64_t i) -> u64 { return xv(i) == INFINITY; }, sh);
      token = f < 0 ? 0 : static_cast<int>(f);
    } else if (m == -INFINITY) {
      token = raw_argmax();
    } else {
      // min_p: x >= max + log(min_p) (the host's float sum).
      const float thr = p.log_min_p == -INFINITY ? -INFINITY : m + p.log_min_p;
      auto minp_ok = [&](float v) { return v > -INFINITY && v >= thr; };
      // top_k: keep x >= the k-th largest value of the row after min_p (ties kept).
      uint32_t kkey = 0;
      if (p.top_k > 0 && p.top_k < vocab) {
        u64 ab;
        kkey = radix_select(vocab, static_cast<u64>(p.top_k),
                            [&](int64_t i, uint32_t& key, u64& w) {
                              const float v = xv(i);
                              key = fkey(minp_ok(v) ? v : -INFINITY);
                              w = 1;
                            },
                            sh, &ab);
      }
      auto valid = [&](float v) { return minp_ok(v) && fkey(v) >= kkey; };
      auto mass = [&](float v) -> u64 { return valid(v) ? static_cast<u64>(expf(v - m) * kFixScale) : 0; };
      u64 tsum = 0;
      for (int64_t i = threadIdx.x; i < vocab; i += kSThreads) tsum += mass(xv(i));
      const u64 total = block_sum_u64(tsum, sh);
      // top_p: the shortest prefix of (x descending, id ascending) with mass >= top_p * total:
      // every key above pkey, and the first c tokens (by id) of key pkey.
      bool cut = false;
      uint32_t pkey = 0;
      long long id_cut = -1;
      u64 kept_total = total;
      if (p.top_p < 1.0f && total > 0) {
        const double want = ceil(static_cast<double>(p.top_p) * static_cast<double>(total));
        const u64 need = want < 1.0 ? 1 : static_cast<u64>(want);
        if (need < total) {
          u64 above;
          pkey = radix_select(vocab, need,
                              [&](int64_t i, uint32_t& key, u64& w) {
                                const float v = xv(i);
                                key = fkey(v);
                                w = mass(v);
                              },
                              sh, &above);
          const u64 q = static_cast<u64>(expf(key_float(pkey) - m) * kFixScale);
          const u64 c = q ? (need - above + q - 1) / q : 1;
          const long long f = find_first(
              vocab, c - 1, [&](int64_t i) -> u64 { const float v = xv(i); return valid(v) && fkey(v) == pkey; }, sh);
          cut = true;
          id_cut = f < 0 ? vocab : f;
          kept_total = above + c * q;
        }
      }
      auto kept_mass = [&](int64_t i) -> u64 {
        const float v = xv(i);
        if (cut) {
          const uint32_t k = fkey(v);
          if (k < pkey || (k == pkey && i > id_cut)) return 0;
        }
        return mass(v);
      };
      if (kept_total == 0) {  // nothing kept: the host falls back to the raw argmax
        token = raw_argmax();
      } else {
        u64 target = static_cast<u64>(p.u * static_cast<double>(kept_total));
        if (target >= kept_total) target = kept_total - 1;
        const long long f = find_first(vocab, target, kept_mass, sh);
        token = f < 0 ? 0 : static_cast<int>(f);
      }
    }
  }
  DeviceSampleOut o;
  o.token = token;
  if (p.want_logprob) {
    float tmax = -INFINITY;
    for (int64_t i = threadIdx.x; i < vocab; i += kSThreads) tmax = fmaxf(tmax, rawv(i));
    const float mr = block_max(tmax, sh);
    const float tx = rawv(token);
    float se = 0.0f;
    u64 above = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += kSThreads) {
      const float v = rawv(i);
      if (v > -INFINITY) se += expf(v - mr);
      above += v > tx;
    }
    const double sum = block_sum_double(static_cast<double>(se), sh);
    above = block_sum_u64(above, sh);
    o.rank = static_cast<int32_t>(above) + 1;
    const double lse = static_cast<double>(mr) + log(sum);
    o.logprob = static_cast<float>(static_cast<double>(tx) - lse);
    if (p.n_top > 0 && top != nullptr)
      block_top(vocab, static_cast<int>(min(static_cast<int64_t>(min(p.n_top, kSampleMaxTop)), vocab)), lse, rawv,
                top + static_cast<int64_t>(blockIdx.x) * kSampleMaxTop, sh);
  }
  if (threadIdx.x == 0) out[blockIdx.x] = o;
}

}  // namespace

cudaError_t launch_sample_rows(const float* x, int64_t vocab, const DeviceSampleRow* rows, int n_rows,
                               const DeviceSampleAdj* adj, int64_t n_adj_total, DeviceSampleOut* out,
                               DeviceSampleTop* top, cudaStream_t stream) {
  if (n_rows <= 0) return cudaSuccess;
  if (vocab <= 0 || vocab >= INT_MAX || n_adj_total < 0 || n_adj_total >= INT_MAX) return cudaErrorInvalidValue;
  // The adjusted-id index (bits + first entry per 32-id word), only for launches with adjustments.
  const size_t smem = n_adj_total > 0 ? static_cast<size_t>(adj_words(vocab)) * 2 * sizeof(uint32_t) : 0;
  if (smem + sizeof(SampleShared) > 48 * 1024) {  // beyond the default: opt in (fails past the device's limit)
    const cudaError_t e =
        cudaFuncSetAttribute(sample_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  sample_rows_kernel<<<n_rows, kSThreads, smem, stream>>>(x, vocab, rows, adj, out, top);
  return cudaGetLastError();
}

__global__ void feed_tokens_kernel(int32_t* __restrict__ tokens, const int32_t* __restrict__ feed,
                                   const int32_t* __restrict__ ids, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (feed[i] >= 0) tokens[i] = ids[feed[i]];
}

cudaError_t launch_feed_tokens(int32_t* tokens, const int32_t* feed, const int32_t* ids, int n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int threads = 256, blocks = std::min((n + threads - 1) / threads, 64);
  feed_tokens_kernel<<<blocks, threads, 0, stream>>>(tokens, feed, ids, n);
  return cudaGetLastError();
}

// Scratch layout, the same for every launch (the tickets must stay where the last launch left
// them zeroed): parts [kArgmaxMaxSliceRows][kArgmaxMaxSlices], then the tickets.
size_t argmax_scratch_bytes() {
  return static_cast<size_t>(kArgmaxMaxSliceRows) * (kArgmaxMaxSlices * sizeof(ArgmaxPart) + sizeof(unsigned int));
}

cudaError_t launch_argmax_rows(const float* x, int n_rows, int64_t vocab, int32_t* out, int32_t* host_out,
                               void* scratch, cudaStream_t stream) {
  if (n_rows <= 0) return cudaSuccess;
  if (vocab <= 0 || vocab >= INT_MAX) return cudaErrorInvalidValue;
  const bool vec4 = vocab % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  // Slices of at least 2,048 elements (a 256-thread block's two float4 loads a thread), enough
  // of them that the grid has ~256 blocks; one 512-thread block a row past 64 rows or without
  // scratch.
  int slices = 1;
  if (scratch != nullptr && n_rows <= kArgmaxMaxSliceRows) {
    const int64_t by_size = vocab / 2048;
    const int64_t want = 256 / n_rows;
    slices = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({by_size, want, kArgmaxMaxSlices})));
  }
  if (slices == 1) {
    const dim3 grid(1, static_cast<unsigned>(n_rows));
    if (vec4)
      argmax_rows_kernel<true, kThreads><<<grid, kThreads, 0, stream>>>(x, vocab, vocab, out, host_out, nullptr,
                                                                        nullptr);
    else
      argmax_rows_kernel<false, kThreads><<<grid, kThreads, 0, stream>>>(x, vocab, vocab, out, host_out, nullptr,
                                                                         nullptr);
    return cudaGetLastError();
  }
  const int64_t chunk = ((vocab + slices - 1) / slices + 3) / 4 * 4;
  slices = static_cast<int>((vocab + chunk - 1) / chunk);
  auto* part = static_cast<ArgmaxPart*>(scratch);
  // (part is [n_rows][slices] for this launch's slice count; the tickets sit after the whole
  // part region, where a launch with more rows or slices never writes parts)
  auto* count = reinterpret_cast<unsigned int*>(part + int64_t{kArgmaxMaxSliceRows} * kArgmaxMaxSlices);
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(n_rows));
  constexpr int kSliceThreads = 256;
  if (vec4)
    argmax_rows_kernel<true, kSliceThreads><<<grid, kSliceThreads, 0, stream>>>(x, vocab, chunk, out, host_out, part,
                                                                              count);
  else
    argmax_rows_kernel<false, kSliceThreads><<<grid, kSliceThreads, 0, stream>>>(x, vocab, chunk, out, host_out, part,
                                                                               count);
  return cudaGetLastError();
}

}  // namespace ember::cuda
