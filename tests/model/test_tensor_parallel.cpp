// Tensor parallel on the CPU ranks (RunnerOptions::tensor_parallel): a batch of several
// sequences (prefill chunks and decodes side by side) gives the same logits and greedy ids on
// 2 ranks as on one, copy-on-write copies every rank's K/V, and head counts that cannot be
// split are refused with a message that names why. (Fidelity against transformers on 2 and 4
// ranks: test_fidelity.cpp.)
#include "copy_blocks_check.h"
#include "runner/model_runner.h"

#include <gtest/gtest.h>

#include <vector>

namespace ember {
namespace {

const std::string kModels = EMBER_FIXTURES_DIR "/models";

std::unique_ptr<ModelRunner> load(const std::string& path, int tensor_parallel, DType kv = DType::F32) {
  RunnerOptions o;
  o.n_threads = 2;
  o.kv_dtype = kv;
  o.tensor_parallel = tensor_parallel;
  auto r = ModelRunner::load(path, o);
  EXPECT_TRUE(r.is_ok()) << r.message();
  if (!r.is_ok()) return nullptr;
  EXPECT_TRUE((*r)->allocate_kv_cache({16, 16}).is_ok());
  return std::move(*r);
}

// Three sequences in one step: a 21-token prompt (blocks 3, 4), a 5-token chunk at position 16
// of a sequence whose first block (0) was written by an earlier step, and one decode token.
std::vector<ForwardBatch> steps() {
  ForwardBatch first;  // the first 16 tokens of sequence B, then one of C: prefills
  for (int i = 0; i < 16; ++i) {
    first.token_ids.push_back(7 + 3 * i);
    first.positions.push_back(i);
    first.slot_mapping.push_back(0 * 16 + i);
  }
  for (int i = 0; i < 9; ++i) {
    first.token_ids.push_back(40 + i);
    first.positions.push_back(i);
    first.slot_mapping.push_back(6 * 16 + i);
  }
  first.query_start = {0, 16, 25};
  first.seq_lens = {16, 9};
  first.block_tables = {0, 1, 6, 7};
  first.max_blocks_per_seq = 2;
  first.logit_rows = {15, 24};

  ForwardBatch mixed;
  for (int i = 0; i < 21; ++i) {  // A: prompt
    mixed.token_ids.push_back(100 + 5 * i);
    mixed.positions.push_back(i);
    mixed.slot_mapping.push_back((i < 16 ? 3 : 4) * 16 + i % 16);
  }
  for (int i = 0; i < 5; ++i) {  // B: chunk at 16..20
    mixed.token_ids.push_back(60 + i);
    mixed.positions.push_back(16 + i);
    mixed.slot_mapping.push_back(1 * 16 + i);
  }
  mixed.token_ids.push_back(77);  // C: decode at 9
  mixed.positions.push_back(9);
  mixed.slot_mapping.push_back(6 * 16 + 9);
  mixed.query_start = {0, 21, 26, 27};
  mixed.seq_lens = {21, 21, 10};
  mixed.block_tables = {3, 4, 0, 1, 6, 7};
  mixed.max_blocks_per_seq = 2;
  mixed.logit_rows = {0, 20, 21, 25, 26};
  return {first, mixed};
}

TEST(TensorParallel, MixedBatchesMatchOneRank) {
  for (const char* model : {"llama3/hf", "qwen2/hf", "gemma3/hf", "mistral/model-f32.gguf"}) {
    SCOPED_TRACE(model);
    auto one = load(kModels + "/" + model, 1);
    auto two = load(kModels + "/" + model, 2);
    ASSERT_TRUE(one && two);
    EXPECT_EQ(two->tensor_parallel(), 2);
    EXPECT_EQ(two->config().n_heads, one->config().n_heads);  // the checkpoint's, not a rank's
    // Each rank caches its share of the K/V heads (gemma3's one head: all of it).
    const int kv_heads = one->config().n_kv_heads, rank_heads = kv_heads >= 2 ? kv_heads / 2 : 1;
    EXPECT_EQ(two->kv_bytes_per_block(16) * static_cast<size_t>(kv_heads),
              one->kv_bytes_per_block(16) * static_cast<size_t>(rank_heads));
    for (const ForwardBatch& b : steps()) {
      std::vector<float> l1, l2;
      ASSERT_TRUE(one->execute(b, l1).is_ok());
      ASSERT_TRUE(two->execute(b, l2).is_ok());
      ASSERT_EQ(l1.size(), l2.size());
      ASSERT_EQ(l1.size(), b.logit_rows.size() * static_cast<size_t>(one->vocab_size()));
      // The same products, summed in another order (each rank's partial sums, then the ranks).
      EXPECT_LE(copy_blocks_check::rel(l2, l1), 1e-5);
    }
  }
}

TEST(TensorParallel, GreedyIdsMatchOneRank) {
  auto one = load(kModels + "/llama3/hf", 1);
  auto two = load(kModels + "/llama3/hf", 2);
  ASSERT_TRUE(one && two);
  ASSERT_TRUE(two->can_execute_argmax());
  for (const ForwardBatch& b : steps()) {
    std::vector<float> logits;
    std::vector<int32_t> ids;
    ASSERT_TRUE(one->execute(b, logits).is_ok());
    ASSERT_TRUE(two->execute_argmax(b, ids).is_ok());
    ASSERT_EQ(ids.size(), b.logit_rows.size());
    const int64_t vocab = one->vocab_size();
    for (size_t r = 0; r < ids.size(); ++r) {
      const float* row = logits.data() + r * static_cast<size_t>(vocab);
      EXPECT_EQ(ids[r], std::max_element(row, row + vocab) - row) << "row " << r;
    }
  }
}

TEST(TensorParallel, CopyBlocksCopiesEveryRank) {
  for (const DType kv : {DType::F32, DType::I8}) {
    SCOPED_TRACE(dtype_name(kv));
    auto two = load(kModels + "/llama3/hf", 2, kv);
    ASSERT_TRUE(two);
    copy_blocks_check::run(*two, 1e-6);
  }
}

TEST(TensorParallel, RefusesShapesThatDoNotSplit) {
  RunnerOptions o;
  o.n_threads = 2;
  o.tensor_parallel = 3;  // llama3: 8 heads
  auto r = ModelRunner::load(kModels + "/llama3/hf", o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("does not divide the model's 8 attention heads"), std::string::npos) << r.message();

  o.tensor_parallel = 8;  // 8 heads, 2 K/V heads: fine; FFN 160 / 8 = 20 columns: fine for f32
  EXPECT_TRUE(ModelRunner::load(kModels + "/llama3/hf", o).is_ok());

  // (Quantized rows that do not split at a block boundary: tests/python/test_cli_tensor_parallel.py,
  // on a Q4_K model `ember quantize` writes.)
  for (int bad : {0, -1, 65}) {
    o.tensor_parallel = bad;
    r = ModelRunner::load(kModels + "/llama3/hf", o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.message().find("tensor parallel size"), std::string::npos) << r.message();
  }
}

}  // namespace
}  // namespace ember
