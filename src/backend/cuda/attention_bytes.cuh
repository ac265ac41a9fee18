#pragma once
// Device helpers of the decode kernels over a one-byte K/V cache (FP8 e4m3 / e5m2, INT8 with
// per-(slot, head) scales; nvcc only): the shared-memory swizzles of the byte tiles and the
// byte -> F16 conversions the MMA fragments are built with. attention_fp8.cu (16 query rows
// a block) and attention_fp8_swap.cu (keys as the MMA rows, up to 8 query rows) use them.
#include "backend/cuda/attention_common.cuh"

#include <cstdint>

namespace ember::cuda::attn {

// The decode kernels over a one-byte cache skip the widening pass of the 16-bit kernel
// (attention.cu): no second F16 tile (an extra shared-memory write + read per element and the
// latency of a widen before each tile's barrier), and a stage costs half the shared memory, so
// more tiles are in flight per SM. Each lane converts the bytes it loads itself (hardware fp8x2 -> f16x2
// for e4m3, byte permutes for e5m2: an e5m2 byte is the top byte of its half; INT8 as
// 1152 + q). Which fragment register holds which head dim / key: the kernels' files.
//
// Tiles are [kTileKeys][D] bytes; the 16-byte chunks of a row are XOR-swizzled by key bits 0-2
// so that the fragment loads and the loader's cp.async writes (D 128: one 8-lane phase writes
// chunks 4j .. 4j + 3 of two consecutive keys) are all free of bank conflicts. The two XOR
// masks are linear maps of key bits 0-2 found by an exhaustive search over those patterns; D 64
// keeps 2-way conflicts on V.

// K: a read phase takes keys 2p and 2p + 1 at the same 4 chunks.   mask 0 4 0 4 0 4 0 4
template <int D>
__device__ __forceinline__ int fp8_k_chunk(int key, int chunk) {
  return chunk ^ ((key & 1) * (D / 32));
}
// V: a read phase takes keys 2t + const (t = 0..3) at the same chunk pair.   mask 0 4 4 0 2 6 6 2
template <int D>
__device__ __forceinline__ int fp8_v_chunk(int key, int chunk) {
  return chunk ^ ((4 * ((key ^ (key >> 1)) & 1) + 2 * ((key >> 2) & 1)) & (D / 16 - 1));
}

// Four fp8 values (element 0 in the low byte) -> two f16x2 words, as fp8x4_to_half4, but e4m3
// converts the high pair in place (.H1 operand) instead of shifting it down first: one
// instruction less per 4 bytes in the kernel's hottest code.
template <bool kE4M3>
__device__ __forceinline__ uint2 fp8x4_to_f16x4(uint32_t w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (kE4M3) {
    uint32_t lo, hi;
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
    return make_uint2(lo, hi);
  }
#endif
  return fp8x4_to_half4<kE4M3>(w);
}

// Four cache bytes -> two f16x2 words (element 0 in the low half of .x): fp8 as above; int8 as
// 1152 + q (exact: under 0x64 the byte q ^ 0x80 = q + 128 is the mantissa of 1024 + q + 128),
// without subtracting the 1152: the kernel takes 1152 * (sum of the Q row) off each score and
// 1152 * (sum of P) off O (an extra MMA column of constant 1152 computes the latter), which
// costs less than two HSUB2 per four bytes.
constexpr uint32_t kI8Offset2 = 0x64806480u;  // F16 1152 in both halves
constexpr float kI8Offset = 1152.0f;
template <int kFmt>
__device__ __forceinline__ uint2 kv4_to_f16x4(uint32_t w) {
  if constexpr (kFmt == kKvI8) {
    const uint32_t x = w ^ 0x80808080u;
    return make_uint2(__byte_perm(x, 0x64646464u, 0x4140), __byte_perm(x, 0x64646464u, 0x4342));
  } else {
    return fp8x4_to_f16x4<kFmt == kKvE4M3>(w);
  }
}

// Word j (a compile-time constant after unrolling) of a 16-byte value.
__device__ __forceinline__ uint32_t word_of(const uint4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// Byte e of a and of b as the halves of one f16x2 (a low) for e = 0..3: the B register of
// two keys (a, b) at one output dim.
template <int kFmt>
__device__ __forceinline__ void fp8_key_pairs(uint32_t a, uint32_t b, uint32_t (&h)[4]) {
  const uint2 lo = kv4_to_f16x4<kFmt>(__byte_perm(a, b, 0x5140));  // a0 b0 a1 b1
  const uint2 hi = kv4_to_f16x4<kFmt>(__byte_perm(a, b, 0x7362));  // a2 b2 a3 b3
  h[0] = lo.x;
  h[1] = lo.y;
  h[2] = hi.x;
  h[3] = hi.y;
}

// The V bytes a lane reads for P V in both kernels: keys 2t, 2t + 1, 2t + 8, 2t + 9 of the warp's
// 16 (from key_off) at dims (D/8) g .. (D/8) g + D/8 - 1 (g = lane / 4, t = lane % 4).
// vw[key][word]
template <int D>
__device__ __forceinline__ void load_v_quad(uint32_t (&vw)[4][D / 32], const uint8_t* v_tile, int key_off,
                                            int lane) {
  constexpr int kB = D / 8;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int key = key_off + 2 * t + (j & 1) + (j >> 1) * 8;
    const uint8_t* p = v_tile + key * D + 16 * fp8_v_chunk<D>(key, kB * g / 16) + kB * g % 16;
    if constexpr (kB == 16) {
      const uint4 x = *reinterpret_cast<const uint4*>(p);
      vw[j][0] = x.x, vw[j][1] = x.y, vw[j][2] = x.z, vw[j][3] = x.w;
    } else {
      const uint2 x = *reinterpret_cast<const uint2*>(p);
      vw[j][0] = x.x, vw[j][1] = x.y;
    }
  }
}

// The cp.async pipeline of a one-byte decode block (128 threads): kStages stages of K and V
// tiles (chunks swizzled as above) and INT8's per-key scales. The block-table ids of a tile are
// loaded from global memory an iteration before its copy, or (kStagedIds) copied into shared
// memory with the group kStages - 1 tiles earlier (KvTileLoader::stage_ids): group g brings
// tile g and the ids of tile g + kStages - 1, whose copy starts once group g has landed. Under
// full DRAM traffic a global load waits behind the tiles in flight, longer than the keys-as-M
// kernel's iteration (ncu put a tenth of its stall samples on the ids); the 16-row kernel's
// longer iteration hides it, and staging measured 5% slower there (session 18 call 8).
// Shared memory: byte_ring_smem.
//   [kStages][K, V][kTileKeys][D] bytes | INT8: [kStages][K, V][kTileKeys] floats | staged: [kStages][ids]
template <int D, int kStages, bool kI8, int kRun, bool kStagedIds>
struct ByteTileRing {
  using Loader = KvTileLoader<D, kDecodeWarps * 32, kRun>;
  static constexpr int kTileBytes = kTileKeys * D;
  static constexpr int kIds = Loader::kIdsPerTile;
  static_assert(kIds == kTileKeys + 1, "byte_ring_smem sizes the ids so");
  uint8_t* kv;
  float* sc;
  int32_t* ids;
  Loader ld;
  int n_tiles, issue_stage = kStages - 1, read_stage = 0;

  __device__ __forceinline__ ByteTileRing(void* smem, const PagedAttnArgs& a, const AttnSpan& sp)
      : kv(static_cast<uint8_t*>(smem)),
        sc(reinterpret_cast<float*>(kv + kStages * 2 * kTileBytes)),
        ids(reinterpret_cast<int32_t*>(sc + (kI8 ? kStages * 2 * kTileKeys : 0))),
        ld(a, sp.seq, blockIdx.y, sp.t_begin, sp.kv_hi),
        n_tiles(sp.n_tiles) {}

  __device__ __forceinline__ void issue(const PagedAttnArgs& a, int stage) {
    ld.issue([=](int k0, int key, int c, int which) {  // (the swizzles depend on key & 7 only)
      const int pos = which ? fp8_v_chunk<D>(key, c) : fp8_k_chunk<D>(key, c);
      return kv + (stage * 2 + which) * kTileBytes + (k0 + key) * D + 16 * pos;
    });
    if constexpr (kI8)
      ld.issue_scales(a.k_scales, a.v_scales, a.n_kv_heads, blockIdx.y, sc + stage * 2 * kTileKeys,
                      sc + (stage * 2 + 1) * kTileKeys);
  }
  // Tiles 0 .. kStages - 2 in flight (ids from the block table), one commit group each.
  // prologue_rope, for a kernel with the fused rope that deferred its PDL wait (as the 16-bit
  // kernel does): the leading tiles whose keys all precede the new tokens', the wait, then the
  // rope and store of the block's new rows; it returns the tiles issued, and prologue(a, from)
  // issues the rest.
  template <typename S>
  __device__ __forceinline__ int prologue_rope(const PagedAttnArgs& a, const AttnSpan& sp, int group) {
    int st = 0;
    for (; st < kStages - 1 && st < n_tiles && sp.t_begin + (st + 1) * kTileKeys <= sp.pos_base; ++st)
      prologue_tile(a, st);
    pdl_finish_deferred(a.pdl_release_early);
    decode_rope_store<S, D>(a, sp.q0, sp.n_rows, group, blockIdx.y);  // (block-uniform)
    return st;
  }
  __device__ __forceinline__ void prologue(const PagedAttnArgs& a, int from = 0) {
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st)
      if (st >= from) prologue_tile(a, st);
    if (!kStagedIds && kStages - 1 < n_tiles) ld.load_ids();
  }
  __device__ __forceinline__ void prologue_tile(const PagedAttnArgs& a, int st) {
    if (st < n_tiles) {
      ld.load_ids();
      issue(a, st);
    }
    if constexpr (kStagedIds) ld.stage_ids(ids + (st + kStages - 1) % kStages * kIds, st + kStages - 1, threadIdx.x);
    cp_async_commit();
  }
  // Waits for tile `tile` (everyone is done with the one before after the barrier), starts the
  // copy of tile + kStages - 1 and returns the stage of tile: its K tile, V after it, and
  // (INT8) its K scales, V's after them.
  __device__ __forceinline__ void next(const PagedAttnArgs& a, int tile, const uint8_t*& k_tile, const float*& scales) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (tile + kStages - 1 < n_tiles) {
      if constexpr (kStagedIds) ld.load_ids(ids + (tile + kStages - 1) % kStages * kIds);
      issue(a, issue_stage);
      if (!kStagedIds && tile + kStages < n_tiles) ld.load_ids();
    }
    if constexpr (kStagedIds) {
      // (its slot held the ids read an iteration ago, before this barrier)
      const int ahead = tile + 2 * kStages - 2;
      ld.stage_ids(ids + ahead % kStages * kIds, ahead, threadIdx.x);
    }
    cp_async_commit();
    issue_stage = issue_stage + 1 == kStages ? 0 : issue_stage + 1;
    k_tile = kv + read_stage * 2 * kTileBytes;
    scales = sc + read_stage * 2 * kTileKeys;
    read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;
  }
};
// A one-byte decode kernel's launch for L.a's head dim (64 / 128), cache type (FP8 e4m3 / e5m2,
// INT8) and stages (2, 3, 4, 6): Kernel::launch<D, kStages, kFmt>(L, grid, stream);
// cudaErrorInvalidValue for anything else.
template <typename Kernel, int D, int kFmt>
cudaError_t launch_byte_decode_stages(const Launch& L, int stages, dim3 grid, cudaStream_t stream) {
  switch (stages) {
    case 2: return Kernel::template launch<D, 2, kFmt>(L, grid, stream);
    case 3: return Kernel::template launch<D, 3, kFmt>(L, grid, stream);
    case 4: return Kernel::template launch<D, 4, kFmt>(L, grid, stream);
    case 6: return Kernel::template launch<D, 6, kFmt>(L, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}
template <typename Kernel, int D>
cudaError_t launch_byte_decode_format(const Launch& L, int stages, dim3 grid, cudaStream_t stream) {
  switch (L.a.kv_type) {
    case DType::FP8_E4M3: return launch_byte_decode_stages<Kernel, D, kKvE4M3>(L, stages, grid, stream);
    case DType::FP8_E5M2: return launch_byte_decode_stages<Kernel, D, kKvE5M2>(L, stages, grid, stream);
    case DType::I8: return launch_byte_decode_stages<Kernel, D, kKvI8>(L, stages, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}
template <typename Kernel>
cudaError_t launch_byte_decode(const Launch& L, int stages, dim3 grid, cudaStream_t stream) {
  switch (L.a.head_dim) {
    case 64: return launch_byte_decode_format<Kernel, 64>(L, stages, grid, stream);
    case 128: return launch_byte_decode_format<Kernel, 128>(L, stages, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ember::cuda::attn
