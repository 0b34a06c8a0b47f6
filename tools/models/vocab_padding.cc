// Vocabulary padding of Megatron and vLLM (tools/models/vocab_padding.h).
#include "tools/models/vocab_padding.h"

#include <string>

namespace ferry::models {

namespace {

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Both frameworks' divide() asserts with this message when a size does not split evenly.
Status CheckDivisible(const std::string& what, int64_t n, int64_t by) {
  if (n % by == 0) return Status::Ok();
  return InvalidArgument(what + ": " + std::to_string(n) + " is not divisible by " +
                         std::to_string(by));
}

}  // namespace

Result<int64_t> MegatronPaddedVocab(int64_t vocab, int tp, int divisible_by, bool pad) {
  if (vocab < 1 || tp < 1 || divisible_by < 1) {
    return InvalidArgument("vocab, tp and vocab_divisible_by must be positive");
  }
  // megatron/core/tokenizers/utils/build_tokenizer.py vocab_size_with_padding: multiple = divisible_by * tp
  if (pad) return RoundUp(vocab, static_cast<int64_t>(divisible_by) * tp);
  // megatron/core/tensor_parallel/utils.py VocabUtility: divide(global_vocab_size, world_size)
  FERRY_RETURN_IF_ERROR(CheckDivisible(
      "Megatron-Core vocab-parallel embedding of the unpadded vocabulary (pad_vocab=no)", vocab, tp));
  return vocab;
}

Result<int64_t> VllmPaddedVocab(int64_t vocab, int tp) {
  if (vocab < 1 || tp < 1) return InvalidArgument("vocab and tp must be positive");
  // vllm/model_executor/layers/vocab_parallel_embedding.py pad_vocab_size(vocab, 64)
  const int64_t padded = RoundUp(vocab, 64);
  // vllm/model_executor/layers/vocab_parallel_embedding.py: divide(num_embeddings_padded, tp_size)
  FERRY_RETURN_IF_ERROR(CheckDivisible(
      "vLLM VocabParallelEmbedding of the vocabulary padded to 64 (" + std::to_string(vocab) +
          " -> " + std::to_string(padded) + ")",
      padded, tp));
  return padded;
}

Result<int64_t> SglangPaddedVocab(int64_t vocab, int ranks) {
  if (vocab < 1 || ranks < 1) return InvalidArgument("vocab and ranks must be positive");
  // sglang srt/layers/vocab_parallel_embedding.py VocabParallelEmbedding.__init__: "Support the
  // case where the vocab size is not divisible by the TP size": padding_size *= tp_size
  const int64_t padded = RoundUp(vocab, 64);
  if (padded % ranks == 0) return padded;
  return RoundUp(vocab, 64 * static_cast<int64_t>(ranks));
}

}  // namespace ferry::models
