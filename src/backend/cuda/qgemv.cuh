#pragma once
// Weight-only quantized matrices on the GPU (int4 with group-128 scales, FP8 e4m3 and int8 with
// one scale per output row): the packed layout, the load-time quantizers, dequantization (for
// get_rows and the large-batch GEMM fallback) and the tensor-core GEMV for batches of 1-8.
//
// Layout of a packed [m, k] matrix (one allocation, plain C++ so host code can size it):
//   rows of k_pad elements (k rounded up to the format's unit, padded with zero weights):
//     int4: k_pad / 2 bytes a row. Within each 16-byte slice (32 elements) the u32 word i holds
//           elements 8i..8i+7 as nibbles: element 8i + 2p at bit 4p, 8i + 2p + 1 at bit 16 + 4p
//           (p = 0..3), stored as q + 8 with q in [-8, 7]; the value is q * scale.
//     fp8:  k_pad bytes a row, plain e4m3 (cuBLASLt reads them as they are).
//     int8: k_pad bytes a row, two's complement q in [-127, 127]; the value is q * scale.
//   then, at a 256-byte aligned offset, the scales:
//     int4: bf16 [ceil(m / 16)][k_pad / 128][16] (qweight_int4_scale_index: for each 16-row GEMV
//           tile and group, the tile's 16 scales are 32 contiguous aligned bytes, which the
//           staged GEMV copies with two 16-byte cp.async; rows past m have scale 0);
//     fp8, int8: f32 [m].
// The CUDA backend labels packed tensors Q4_0 (int4) / FP8_E4M3 (fp8) / Q8_0 (int8) with their
// logical shape [m, k]; their bytes are this layout, not GGML's (on the device only the CUDA
// backend reads them: is_packed / qformat_of in cuda_backend_impl.h).
#include "backend/cuda/hold_gate.cuh"
#include "backend/cuda/l2_prefetch.h"
#include "backend/cuda/rope_epilogue.h"
#include "backend/cuda/xnorm.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ember::cuda {

#ifdef __CUDACC__
#define EMBER_QHD __host__ __device__
#else
#define EMBER_QHD
#endif

enum class QFormat : int { Int4 = 0, Fp8 = 1, Int8 = 2 };

constexpr int kQGroup = 128;       // int4 group size (elements sharing one scale)
constexpr int kQGemvMaxBatch = 8;  // rows of x the tensor-core GEMV takes (one n8 mma tile)

// Elements a row is padded to: a GEMV warp step covers 128 (int4) / 64 (fp8, int8) elements.
EMBER_QHD inline int64_t qformat_unit(QFormat f) { return f == QFormat::Int4 ? 128 : 64; }
EMBER_QHD inline int64_t qweight_k_pad(QFormat f, int64_t k) {
  const int64_t u = qformat_unit(f);
  return (k + u - 1) / u * u;
}
EMBER_QHD inline size_t qweight_row_bytes(QFormat f, int64_t k) {
  return static_cast<size_t>(f == QFormat::Int4 ? qweight_k_pad(f, k) / 2 : qweight_k_pad(f, k));
}
EMBER_QHD inline size_t qweight_scales_offset(QFormat f, int64_t m, int64_t k) {
  return (qweight_row_bytes(f, k) * static_cast<size_t>(m) + 255) / 256 * 256;
}
// Element index of the int4 scale of (row, group) among the scales (groups = k_pad / 128).
EMBER_QHD inline int64_t qweight_int4_scale_index(int64_t groups, int64_t row, int64_t group) {
  return ((row / 16) * groups + group) * 16 + row % 16;
}
EMBER_QHD inline size_t qweight_scales_bytes(QFormat f, int64_t m, int64_t k) {
  return f == QFormat::Int4 ? static_cast<size_t>(qweight_k_pad(f, k) / kQGroup * ((m + 15) / 16 * 16)) * 2
                            : static_cast<size_t>(m) * 4;
}
EMBER_QHD inline size_t qweight_bytes(QFormat f, int64_t m, int64_t k) {
  return qweight_scales_offset(f, m, k) + qweight_scales_bytes(f, m, k);
}

// Quantizes rows [r0, r0 + nr) of a matrix [m, k] from src (those rows, dense, F32 / F16 /
// BF16 given by src_type: 0 F32, 1 F16, 2 BF16) into the packed matrix at dst (round to
// nearest; int4: scale = the group's value of largest magnitude / -8, rounded to bf16 first;
// fp8: scale = max |row| / 448; int8: scale = max |row| / 127, q = w * (1 / scale) rounded to
// nearest even; a zero row gets scale 1).
cudaError_t launch_qweight_pack(QFormat f, int src_type, const void* src, int64_t r0, int64_t nr,
                                int64_t m, int64_t k, void* dst, cudaStream_t stream);

// Dequantizes rows of a packed matrix into dense rows of k elements: row i of out is packed
// row ids[i] (ids on the device), or r0 + i when ids is null. out_bf16: BF16 out, else F32.
cudaError_t launch_qweight_dequant(QFormat f, const void* w, int64_t m, int64_t k, const int32_t* ids,
                                   int64_t r0, int64_t n_rows, void* out, bool out_bf16, bool pdl,
                                   cudaStream_t stream);

// Where e4m3 rows of activations go: q [rows, k_pad] (zero padded past the row), scale [rows]
// (max |row| / 448): the x operand of the FP8 cuBLASLt GEMM, written by the row quantizer
// below or by a kernel that produces x (RMSNorm, GLU) on its way out.
struct Fp8RowsOut {
  uint8_t* q = nullptr;
  float* scale = nullptr;
  int64_t k_pad = 0;
};

// x [n, k] F32 -> e4m3 [n, k_pad] (zero padded) with one scale per row (max |x| / 448) in
// x_scale [n] (for the cuBLASLt FP8 GEMM of large batches).
cudaError_t launch_quantize_rows_fp8(const float* x, int64_t n, int64_t k, int64_t k_pad, void* xq,
                                     float* x_scale, cudaStream_t stream);
// out[j, r] = out[j, r] * x_scale[j] * w_scale[r] (+ bias[r]); out [n, ld], columns [0, m).
cudaError_t launch_scale_rows_cols(float* out, int64_t n, int64_t m, int64_t ld, const float* x_scale,
                                   const float* w_scale, const float* bias, cudaStream_t stream);

// One packed matrix of a multi-matrix GEMV: out [n, m] = x @ w^T (+ bias).
struct QGemvSeg {
  const void* w = nullptr;  // packed [m, k]
  const float* bias = nullptr;
  float* out = nullptr;
  int64_t m = 0;
  bool accumulate = false;  // out += x @ w^T (+ bias): no separate add of a residual
};
constexpr int kQGemvMaxSegs = 4;

// Whether launch_qgemv_multi (path Auto, no rope epilogue) issues an L2Prefetch (l2_prefetch.h;
// block b of the grid takes the b-th slice) for a GEMV of n rows of x and m rows of weights in
// all, the norm folded or not: only the staged kernel's one-row GEMV on the 8-unit ring without a
// folded norm (a batch-1 step's down projection) has a kernel that does
// (qgemv_staged_prefetch_path); elsewhere the hint is ignored.
bool qgemv_prefetch_takes(QFormat f, int n, int64_t m, int64_t k, bool norm);

// Whether launch_qgemv_multi takes the rope epilogue (rope_epilogue.h; its q and k tiles take
// rows 8j..8j+7 and D/2+8j..D/2+8j+7 of a head, rows g and g + 8 of the mma tile): one row of x,
// three segments q, k, v whose rows are whole heads (head_dim % 16 == 0, k and v of one size),
// none accumulated, and the staged kernel's one-row path with the norm folded at k <= 4096 (the
// one a batch-1 decode step's q/k/v GEMV takes), path Auto.
bool qgemv_rope_takes(QFormat f, const QGemvSeg* segs, int n_segs, int n, int64_t k, const void* x,
                      const XNorm* norm, int head_dim);

// True when the GEMV takes this problem: 1 <= n <= kQGemvMaxBatch, k % 8 == 0, x 16-byte aligned.
bool qgemv_supported(int n, int64_t k, const void* x);

// Which GEMV kernel runs: Staged (qgemv_staged.cu: x staged once per block as BF16 in shared
// memory, persistent grid; needs qgemv_staged_fits), Direct (qgemv.cu: x read per unit), or
// Auto: Staged when it fits, unless EMBER_CUDA_QGEMV=direct. Both compute the same function
// (x rounded to BF16, F16 for int8; exact weights; F32 sums). int8 takes F16 because it holds
// 1152 + q exactly (two instructions a weight pair, see i8x2_to_f16x2), which BF16 does not:
// 11 bits of x instead of 8, but |x| > 65504 becomes inf (batches past 8 rows: BF16 x).
// Fp8Wg: the FP8 GEMV on wgmma (qgemv_wg.cuh), which rounds x to e4m3 with a scale a row (W8A8,
// as the FP8 cuBLASLt GEMM); Auto takes it for FP8 at 1..EMBER_CUDA_FP8_WG rows (default 0) for
// the kinds of GEMV in EMBER_CUDA_FP8_WG_KINDS (qgemv_wg.cuh), and the staged kernel where it does
// not fit.
enum class QGemvPath : int { Auto = 0, Staged = 1, Direct = 2, Fp8Wg = 3 };

// Whether the launchers below fold this RMSNorm into their x staging: only the staged kernel
// does (xnorm.h), so path Auto must pick it.
bool qgemv_takes_norm(QFormat f, int n, int64_t k, const void* x, const XNorm* norm, QGemvPath path = QGemvPath::Auto);

// Up to kQGemvMaxSegs packed matrices of one format sharing x [n, k] F32, one launch.
// norm (null or norm->w null: none): the matrices multiply rms_norm(x) (qgemv_takes_norm).
// rope (null or head_dim 0: none): the rope + K/V store epilogue (GemvRope; qgemv_rope_takes).
// prefetch (null or n 0: none): the next GEMV's weights into L2 (L2Prefetch; ignored where
// qgemv_prefetch_takes is false).
// gate (null: none): the first weight copies wait at a decode attention's start gate
// (hold_gate.cuh; ignored where qgemv_gate_takes is false, and where a prefetch is taken).
cudaError_t launch_qgemv_multi(QFormat f, const QGemvSeg* segs, int n_segs, const float* x, int n,
                               int64_t k, bool pdl, cudaStream_t stream, QGemvPath path = QGemvPath::Auto,
                               const XNorm* norm = nullptr, int cluster = 0, const GemvRope* rope = nullptr,
                               const L2Prefetch* prefetch = nullptr, const HoldGateUse* gate = nullptr);
// Whether launch_qgemv_multi (path Auto, no rope, no prefetch) waits at a start gate for a GEMV
// of n rows of x and m rows of weights in all (norm: folded): the staged kernel's one-row plain
// GEMV where an o projection runs (qgemv_staged_gate_path).
bool qgemv_gate_takes(QFormat f, int n, int64_t m, int64_t k, bool norm);
// out = act(x @ w_gate^T) * (x @ w_up^T) (SiLU or GeLU-tanh) in one launch; gate_out / up_out
// (may be null) also get the plain products; out may equal gate_out.
cudaError_t launch_qgemv_glu(QFormat f, const void* w_gate, const void* w_up, const float* x, int n,
                             int64_t m, int64_t k, bool gelu_tanh, float* out, float* gate_out,
                             float* up_out, bool pdl, cudaStream_t stream, QGemvPath path = QGemvPath::Auto,
                             const XNorm* norm = nullptr, int cluster = 0);

// (cluster: QGemvProblem::cluster.)
// One GEMV launch as the two launchers above set it up for either kernel (kernel argument).
struct QGemvProblem {
  const uint8_t* w[kQGemvMaxSegs] = {};  // GLU: w[0] gate, w[1] up (tiles over the gate only)
  const void* scales[kQGemvMaxSegs] = {};
  const float* bias[kQGemvMaxSegs] = {};
  float* out[kQGemvMaxSegs] = {};
  bool accumulate[kQGemvMaxSegs] = {};
  int64_t m[kQGemvMaxSegs] = {};
  int tile_end[kQGemvMaxSegs] = {};  // cumulative 16-row tiles of segments 0..s
  int n_segs = 0;
  int n_tiles = 0;
  const float* x = nullptr;
  int n = 0;
  int64_t k = 0;
  int64_t row_bytes = 0;
  int n_units = 0;  // 64-byte row units (128 int4 / 64 fp8 or int8 elements)
  XNorm norm;       // staged kernel only
  float* glu_out = nullptr;
  float* gate_out = nullptr;
  float* up_out = nullptr;
  bool gelu = false;
  int cluster = 0;  // staged kernel: 0 its plan; 1 no cluster split; 2, 4, 8 that one (tests)
};

// The staged kernel (qgemv_staged.cu), reached through the two launchers above.
bool qgemv_staged_fits(QFormat f, int n, int64_t k);  // n rows of BF16 x fit beside its 8-unit ring
// ... or, for a plain int4 GEMV (no GLU, no norm folded), beside its 4-unit ring at two blocks an SM.
bool qgemv_staged_fits_plain(QFormat f, int n, int64_t k);
// Whether the staged kernel takes a GEMV (glu: gate/up + GLU; norm: a norm folded in), with a
// cluster of blocks splitting k where otherwise only the direct kernel would (sm_90a;
// EMBER_CUDA_QGEMV_CLUSTER=0 keeps the plans without it); and that cluster's size (1: none; 0:
// the staged kernel does not take it).
bool qgemv_staged_takes(QFormat f, bool glu, bool norm, int n, int64_t k);
int qgemv_staged_cluster(QFormat f, bool glu, bool norm, int n, int64_t k);
// Whether this GPU and the environment allow the cluster split at all (sm_90a, and
// EMBER_CUDA_QGEMV_CLUSTER not 0).
bool qgemv_clusters_allowed();
// Whether a forced cluster of that size (QGemvProblem::cluster 2, 4, 8) takes the GEMV: every
// rank gets units of its own and its slice of x fits beside the 8-unit ring (tests).
bool qgemv_staged_cluster_fits(QFormat f, bool glu, int n, int64_t k, int cluster);
// rope (null or head_dim 0: none): the rope epilogue, on the kernel qgemv_staged_rope_path says.
// (Not a QGemvProblem field: every staged kernel's launch arguments would grow by it.)
// prefetch (null or n 0: none): as launch_qgemv_multi's, on a kernel of its own (the same reason).
// gate (null: none): likewise (qgemv_staged_gate_path), where no prefetch is taken.
cudaError_t launch_qgemv_staged(QFormat f, const QGemvProblem& p, bool glu, bool pdl, cudaStream_t stream,
                                const GemvRope* rope = nullptr, const L2Prefetch* prefetch = nullptr,
                                const HoldGateUse* gate = nullptr);
// Whether launch_qgemv_staged runs a plain (no GLU) GEMV of n rows with the norm folded (norm)
// on the kernel that has the rope epilogue (one row, the 4-unit ring, the norm staged at once).
bool qgemv_staged_rope_path(QFormat f, int n, int64_t k, bool norm);
// Whether launch_qgemv_staged runs a plain GEMV of n rows (norm: folded) on the kernel that
// issues the prefetches of L2Prefetch (one row, no norm, the 8-unit ring, two units a wait).
bool qgemv_staged_prefetch_path(QFormat f, int n, int64_t k, bool norm);
// Whether launch_qgemv_staged runs a plain GEMV of n rows (norm: folded) on a kernel that waits
// at a start gate (one row, no norm, no cluster; int4 on the 4-unit ring, fp8 / int8 on the 8-unit
// ring two units a wait).
bool qgemv_staged_gate_path(QFormat f, int n, int64_t k, bool norm);
// Whether that gated kernel runs a one-matrix GEMV of f on 32-row tiles as two streams
// (EMBER_CUDA_QGEMV_GATE_TWIN, where it runs at one block an SM; tests).
bool qgemv_staged_gate_twin(QFormat f);

}  // namespace ember::cuda
