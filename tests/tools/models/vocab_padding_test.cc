// Tests for tools/models/vocab_padding and the embedding / output rows each framework layout gives
// every TP rank. The expected rows are worked by hand from the upstream code:
//  - vLLM, vllm/model_executor/layers/vocab_parallel_embedding.py: the class docstring's example
//    (vocabulary 1010 padded to 1024; TP2 rank 1 holds tokens 512..1009, then 14 padding rows);
//  - Megatron-LM, megatron/core/tokenizers/utils/build_tokenizer.py vocab_size_with_padding
//    (multiple = make_vocab_size_divisible_by * tp) and megatron/core/tensor_parallel/utils.py
//    VocabUtility (padded / tp rows a rank);
//  - Megatron-Bridge, src/megatron/bridge/models/gpt_provider.py (should_pad_vocab=False: the
//    vocabulary unpadded);
//  - SGLang 0.5.23, python/sglang/srt/layers/vocab_parallel_embedding.py VocabParallelEmbedding
//    (as vLLM's, but "padding_size *= self.tp_size" where the 64-padded vocabulary does not divide
//    by tp: 1010 over tp 3 pads to a multiple of 192, 1152).
#include "tools/models/vocab_padding.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/tools/models/framework_layouts_testutil.h"

namespace ferry::models {
namespace {

TEST(VocabPaddingTest, MegatronPadsToDivisibleByTimesTp) {
  EXPECT_EQ(MegatronPaddedVocab(1010, 1, 128, true).value(), 1024);
  EXPECT_EQ(MegatronPaddedVocab(1010, 2, 128, true).value(), 1024);  // multiple 256
  EXPECT_EQ(MegatronPaddedVocab(1010, 3, 128, true).value(), 1152);  // multiple 384
  EXPECT_EQ(MegatronPaddedVocab(1010, 8, 128, true).value(), 1024);
  EXPECT_EQ(MegatronPaddedVocab(1010, 16, 128, true).value(), 2048);
  EXPECT_EQ(MegatronPaddedVocab(1010, 2, 1, true).value(), 1010);
  // Llama 3's 128256 at the default 128 and tp 8: multiple 1024, 126 * 1024 = 129024.
  EXPECT_EQ(MegatronPaddedVocab(128256, 8, 128, true).value(), 129024);
  // Megatron-Bridge keeps the checkpoint's vocabulary; tp must divide it.
  EXPECT_EQ(MegatronPaddedVocab(1010, 2, 128, false).value(), 1010);
  Result<int64_t> uneven = MegatronPaddedVocab(1010, 4, 128, false);
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("1010 is not divisible by 4"), std::string::npos);
}

TEST(VocabPaddingTest, VllmPadsTo64ThenSplitsOverTp) {
  EXPECT_EQ(VllmPaddedVocab(1010, 1).value(), 1024);
  EXPECT_EQ(VllmPaddedVocab(1010, 2).value(), 1024);
  EXPECT_EQ(VllmPaddedVocab(1010, 16).value(), 1024);  // not 64 * tp
  EXPECT_EQ(VllmPaddedVocab(129280, 32).value(), 129280);  // DeepSeek-V3: 4040 rows a rank
  Result<int64_t> tp3 = VllmPaddedVocab(1010, 3);
  ASSERT_FALSE(tp3.ok());
  EXPECT_NE(tp3.status().message().find("1024 is not divisible by 3"), std::string::npos);
}

// A small dense model whose vocabulary is `vocab`: 12 heads so tp 2, 3 and 4 all divide.
ModelPreset SmallModel(int64_t vocab, bool tied = false) {
  ModelConfig c;
  c.tie_embeddings = tied;
  c.name = "small-vocab-" + std::to_string(vocab);
  c.hidden = 24;
  c.num_layers = 2;
  c.vocab = vocab;
  c.num_heads = 12;
  c.num_kv_heads = 12;
  c.head_dim = 2;
  c.intermediate = 48;
  return PresetOf(c);
}

// The one fragment of `tensor` in `buffer` on `rank` covers rows [lo, hi) (none when lo == hi),
// and the buffer holds `buffer_rows` rows of 24 bf16 values.
void ExpectRows(const Layout& l, int rank, const std::string& buffer, const std::string& tensor,
                int64_t lo, int64_t hi, int64_t buffer_rows) {
  SCOPED_TRACE("rank " + std::to_string(rank) + " " + buffer);
  auto f = FragmentsIn(l, rank, buffer, tensor);
  if (lo == hi) {
    EXPECT_TRUE(f.empty());
  } else {
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].box.lo[0], lo);
    EXPECT_EQ(f[0].box.hi[0], hi);
    EXPECT_EQ(f[0].loc.byte_offset, 0);
  }
  const int b = l.FindBuffer(rank, buffer);
  ASSERT_GE(b, 0);
  EXPECT_EQ(l.buffers[b].bytes, buffer_rows * 24 * 2);
}

TEST(VocabPaddingTest, VllmEmbeddingAndLmHeadRows) {
  ModelPreset p = SmallModel(1010);
  const std::string embed = "model.embed_tokens.weight";
  Layout tp2 = Build(p, "vllm:tp=2");
  ExpectRows(tp2, 0, embed, embed, 0, 512, 512);
  ExpectRows(tp2, 1, embed, embed, 512, 1010, 512);  // 14 padding rows at the end
  ExpectRows(tp2, 1, "lm_head.weight", "lm_head.weight", 512, 1010, 512);
  Layout tp4 = Build(p, "vllm:tp=4");
  ExpectRows(tp4, 3, embed, embed, 768, 1010, 256);
  EXPECT_FALSE(BuildFrameworkLayout(p, Spec("vllm:tp=3")).ok());
  // Vocabulary 65 pads to 128: over tp 4, rank 2 holds token 64 only and rank 3 padding only.
  ModelPreset tiny = SmallModel(65);
  Layout t4 = Build(tiny, "vllm:tp=4");
  ExpectRows(t4, 2, embed, embed, 64, 65, 32);
  ExpectRows(t4, 3, embed, embed, 0, 0, 32);
}

TEST(VocabPaddingTest, SglangPadsTo64TimesTpWhereTpDoesNotDivide) {
  EXPECT_EQ(SglangPaddedVocab(1010, 1).value(), 1024);
  EXPECT_EQ(SglangPaddedVocab(1010, 2).value(), 1024);
  EXPECT_EQ(SglangPaddedVocab(1010, 16).value(), 1024);
  EXPECT_EQ(SglangPaddedVocab(1010, 3).value(), 1152);
  EXPECT_EQ(SglangPaddedVocab(1010, 5).value(), 1280);
  ModelPreset p = SmallModel(1010);
  const std::string embed = "model.embed_tokens.weight";
  Layout tp3 = Build(p, "sglang:tp=3");  // vLLM refuses tp 3 (above); SGLang pads to 1152
  ExpectRows(tp3, 1, embed, embed, 384, 768, 384);
  ExpectRows(tp3, 2, embed, embed, 768, 1010, 384);
  ExpectRows(tp3, 2, "lm_head.weight", "lm_head.weight", 768, 1010, 384);
}

TEST(VocabPaddingTest, MegatronAndBridgeEmbeddingRows) {
  ModelPreset p = SmallModel(1010);
  const std::string hf = "model.embed_tokens.weight";
  const std::string embed = "embedding.word_embeddings.weight";
  Layout tp3 = Build(p, "megatron:tp=3");  // 1152 rows, 384 a rank
  ExpectRows(tp3, 1, embed, hf, 384, 768, 384);
  ExpectRows(tp3, 2, embed, hf, 768, 1010, 384);
  ExpectRows(tp3, 2, "output_layer.weight", "lm_head.weight", 768, 1010, 384);
  Layout small_multiple = Build(p, "megatron:tp=2,vocab_divisible_by=4");  // multiple 8: 1016
  ExpectRows(small_multiple, 1, embed, hf, 508, 1010, 508);
  Layout bridge = Build(p, "megatron:tp=2,pad_vocab=no");
  ExpectRows(bridge, 1, embed, hf, 505, 1010, 505);
  Result<Layout> uneven = BuildFrameworkLayout(p, Spec("megatron:tp=4,pad_vocab=no"));
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("1010 is not divisible by 4"), std::string::npos);
}

// Tied embeddings: vLLM's lm_head is embed_tokens itself (vllm/model_executor/models/llama.py
// tie_weights), so there is no lm_head buffer; Megatron's output layer allocates no weight where
// the embedding is on the same stage (megatron/core/models/gpt/gpt_model.py
// skip_weight_param_allocation), while a separate last stage keeps a copy.
TEST(VocabPaddingTest, TiedEmbeddings) {
  ModelPreset p = SmallModel(1010, /*tied=*/true);
  const std::string embed = "model.embed_tokens.weight";
  Layout v = Build(p, "vllm:tp=2");
  ExpectCoverage(v, p, [](const std::string& n) { return TpReplicated(n) ? 2 : 1; });
  EXPECT_EQ(v.FindBuffer(0, "lm_head.weight"), -1);
  Layout one_stage = Build(p, "megatron:tp=2");
  EXPECT_EQ(one_stage.FindBuffer(0, "output_layer.weight"), -1);
  Layout two_stages = Build(p, "megatron:tp=2,pp=2");
  ExpectRows(two_stages, 3, "output_layer.weight", embed, 512, 1010, 512);
  ExpectRows(two_stages, 1, "embedding.word_embeddings.weight", embed, 512, 1010, 512);
}

}  // namespace
}  // namespace ferry::models
