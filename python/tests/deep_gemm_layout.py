"""DeepGEMM's SM100 layout of FP8 block scales, for ferry's tests: its
transform_sf_into_required_layout on an SM100 GPU with E8M0 scales, whose CUDA extension needs a
GPU, written here in torch from deepseek-ai/DeepGEMM's source. vllm_harness runs it where vLLM
would call DeepGEMM; test_cuda.py takes it as the reference of the packed codes;
test_vllm_layout.py checks it against words worked by hand."""

import torch


def deep_gemm_sm100_transform(sf, mn: int, k: int, recipe: tuple, num_groups: int,
                              is_sfa: bool = False):
    """DeepGEMM's transform_sf_into_required_layout on an SM100 GPU with E8M0 scales, for fp32
    scales (its CUDA extension needs a GPU; written here from deepseek-ai/DeepGEMM
    csrc/apis/layout.hpp and csrc/jit_kernels/impls/smxx_layout.hpp,
    get_mn_major_tma_aligned_packed_ue8m0_tensor_torch): each row of `sf` [G, ceil(mn/gran_mn),
    sf_k] repeated for the gran_mn rows it scales, each scale's biased exponent taken as a
    UE8M0 byte, four k-blocks packed into an int32 (k padded to 4 with 0), stored MN-major
    ([G, mn, P] with strides [P * N4, 1, N4], N4 = mn rounded up to 4), one matrix squeezed."""
    gran_mn = 1 if len(recipe) == 2 else recipe[0 if is_sfa else 1]
    rows = torch.arange(mn) // gran_mn
    batched = (sf if sf.dim() == 3 else sf.unsqueeze(0)).index_select(-2, rows)
    codes = (batched.contiguous().view(torch.int32) >> 23).to(torch.uint8)
    groups, _, sf_k = batched.shape
    stride, padded_k = (mn + 3) // 4 * 4, (sf_k + 3) // 4 * 4
    padded = torch.zeros(groups, stride, padded_k, dtype=torch.uint8)
    padded[:, :mn, :sf_k] = codes
    words = padded.view(-1).view(torch.int32).view(groups, stride, padded_k // 4)
    out = torch.empty_strided((groups, stride, padded_k // 4),
                              (stride * (padded_k // 4), 1, stride), dtype=torch.int32)
    out = out.copy_(words)[:, :mn]
    return out if sf.dim() == 3 else out.squeeze(0)
