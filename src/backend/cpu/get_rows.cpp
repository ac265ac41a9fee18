// get_rows: embedding lookup, dequantizing rows of any dtype the quant module knows.
#include "backend/cpu/context.h"
#include "quant/quant.h"

namespace ember::cpu {

void cpu_get_rows(CpuContext& ctx, const Tensor& table, const int32_t* ids, int n, Tensor& out) {
  EMBER_CHECK(table.device == Device::CPU && out.device == Device::CPU, "get_rows: host tensors only");
  EMBER_CHECK(out.dtype == DType::F32, "get_rows: out must be F32, got {}", dtype_name(out.dtype));
  EMBER_CHECK(quant::can_dequantize(table.dtype), "get_rows: no dequantizer for {}", dtype_name(table.dtype));
  const int64_t d = table.n_cols();
  const int64_t n_vocab = table.n_rows();
  EMBER_CHECK(out.n_cols() == d && out.n_rows() >= n, "get_rows: out {} for {} rows of {}", shape_string(out), n,
              d);
  for (int i = 0; i < n; ++i)
    EMBER_CHECK(ids[i] >= 0 && ids[i] < n_vocab, "get_rows: id {} out of range [0, {})", ids[i], n_vocab);
  float* dst = out.as<float>();
  auto body = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      quant::dequantize_row(table.dtype, table.row_ptr(ids[i]), dst + i * d, d);
  };
  if (static_cast<int64_t>(n) * d < (1 << 16) || ctx.pool.size() == 1) {
    body(0, n);
    return;
  }
  ctx.pool.run([&](int ith, int nth) {
    const Range r = split_range(n, ith, nth);
    if (r.begin < r.end) body(r.begin, r.end);
  });
}

}  // namespace ember::cpu
