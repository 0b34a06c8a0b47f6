// ElementFn: the functions a Convert op's copy pair may apply to each element on the way, for
// tensors an engine stores transformed (core/layout/layout.h StoredTransform), and their
// reference: the host executor, the CUDA convert kernel (core/cuda/batched_convert.cu compiles
// this same header) and `ferry run --verify` all call TransformElement.
//
//   kNone    the element converted as core/base/float_convert.h converts it.
//   kNegExp  vLLM's Mamba-2 A = -exp(A_log). vLLM loads A with
//            composed_weight_loader(sharded_weight_loader(0), lambda x: -torch.exp(x.float()))
//            (vllm/model_executor/layers/mamba/mamba_mixer2.py, the A parameter; the composition
//            is vllm/model_executor/model_loader/weight_utils.py composed_weight_loader): the
//            loader first copies the checkpoint's A_log shard into the fp32 parameter (bf16, fp16
//            -> fp32 is exact), then replaces it with -exp of its fp32 value. So: source element
//            -> fp32 (exact), y = exp in fp32, A = -y (exact: a sign flip), stored as fp32.
//            Special values as torch's exp gives them: exp(+inf) = +inf -> A = -inf,
//            exp(-inf) = +0 -> A = -0.0, exp(x > ~88.72) overflows to +inf -> -inf, tiny
//            results are fp32 subnormals or +0 -> -0.0, and a NaN stays a NaN (its sign bit
//            flipped by the negation, as torch's neg flips it).
//
// exp is not correctly rounded everywhere: the host computes std::exp on fp32 (glibc's expf,
// < 1 ulp), CUDA device code expf, whose documented maximum error is 2 ulp over the full range
// (CUDA C++ Programming Guide, "Mathematical Functions", single precision). A refit therefore
// gives the same bits wherever it is checked where it ran (host against host, GPU against GPU);
// host and GPU results of one element agree to within 2 ulp (NaN payloads may differ).
//
// Plain functions, callable from host and device code (FERRY_HD). Thread-safe.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "core/base/dtype.h"
#include "core/base/float_convert.h"

namespace ferry {

enum class ElementFn : uint8_t {
  kNone = 0,
  kNegExp = 1,
};

// "none", "neg_exp".
inline std::string_view ElementFnName(ElementFn fn) {
  switch (fn) {
    case ElementFn::kNone: return "none";
    case ElementFn::kNegExp: return "neg_exp";
  }
  return "unknown";
}

// The StoredTransform text (core/layout/layout.h) that `fn` applies, "" for kNone.
inline std::string_view ElementFnTransform(ElementFn fn) {
  return fn == ElementFn::kNegExp ? "A = -exp(A_log)" : "";
}

// The element function whose StoredTransform text is `transform`; kNone for any other text.
inline ElementFn ElementFnOfTransform(std::string_view transform) {
  return transform == ElementFnTransform(ElementFn::kNegExp) ? ElementFn::kNegExp : ElementFn::kNone;
}

// Whether a pair `from` -> `to` may carry `fn`: kNone any float conversion, kNegExp bf16, fp16 or
// fp32 into fp32 (what vLLM's loader produces).
FERRY_HD inline bool ElementFnApplies(ElementFn fn, DType from, DType to) {
  if (fn == ElementFn::kNone) return true;
  const bool wide = from == DType::kBF16 || from == DType::kFP16 || from == DType::kFP32;
  return fn == ElementFn::kNegExp && wide && to == DType::kFP32;
}

// -exp(x) in fp32 (see the file comment for rounding and special values).
FERRY_HD inline float NegExp(float x) {
#if defined(__CUDA_ARCH__)
  return -expf(x);
#else
  return -std::exp(x);
#endif
}

// `fn` applied to an element's fp32 value.
FERRY_HD inline float TransformFloat(ElementFn fn, float v) {
  return fn == ElementFn::kNegExp ? NegExp(v) : v;
}

// One element `from` -> `to` (both IsConvertibleFloat) with `fn` applied to its fp32 value.
FERRY_HD inline void TransformElement(ElementFn fn, DType from, DType to, const unsigned char* src,
                                      unsigned char* dst) {
  StoreFromFloat(to, dst, TransformFloat(fn, LoadAsFloat(from, src)));
}

// TransformElement on bits held in registers (float_convert.h BitsAsFloat / FloatAsBits).
FERRY_HD inline uint32_t TransformBits(ElementFn fn, DType from, DType to, uint32_t bits) {
  return FloatAsBits(to, TransformFloat(fn, BitsAsFloat(from, bits)));
}

}  // namespace ferry
