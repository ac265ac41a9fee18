// ModelRunner::copy_blocks on the CPU (copy_blocks_check.h), f32 and int8 K/V (the latter has
// per-slot scales, copied with the block).
#include "copy_blocks_check.h"

namespace ember {
namespace {

TEST(CopyBlocks, DecodeOnACopiedBlockMatchesTheOriginal) {
  for (const DType kv : {DType::F32, DType::I8}) {
    RunnerOptions o;
    o.n_threads = 2;
    o.kv_dtype = kv;
    auto r = ModelRunner::load(EMBER_FIXTURES_DIR "/models/llama3/hf", o);
    ASSERT_TRUE(r.is_ok()) << r.message();
    ASSERT_TRUE((*r)->allocate_kv_cache({8, 16}).is_ok());
    SCOPED_TRACE(dtype_name(kv));
    copy_blocks_check::run(**r, 1e-6);
  }
}

}  // namespace
}  // namespace ember
