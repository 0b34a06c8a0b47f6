"""CUDA arrays through ferry.Refit.register, zero-copy: torch CUDA tensors, CuPy arrays
(__cuda_array_interface__) and DLPack exports, in one process and across processes (one per rank,
all on device 0, the receivers reading the senders' allocations through CUDA IPC or staged over
tcp), every destination element checked; and registration errors that name the buffer. Needs torch
with a CUDA device (the GPU machine, tools/device/python_gpu.sh); skipped visibly elsewhere."""

import os

import pytest

import ferry
from deep_gemm_layout import deep_gemm_sm100_transform
from procs import assert_all_ok, run_ranks
from test_register import DlpackOnly, layouts, one_rank_session, session  # noqa: F401

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch: CUDA registration is not exercised",
                allow_module_level=True)

WORKER = os.path.join(os.path.dirname(__file__), "refit_worker.py")


@pytest.mark.parametrize("side_stream", [False, True])
def test_cuda_tensors_refit_in_place_after_kernels_on_torchs_stream(session, side_stream):
    """Sources written by kernels and not synchronised here: run() waits for the whole device,
    or with `stream=` for that stream only (the sources written on a stream of the caller's)."""
    refit = session.refit(*layouts())
    stream = torch.cuda.Stream() if side_stream else torch.cuda.current_stream()
    w = torch.zeros(4, 6, device="cuda")
    out = torch.full((2, 4, 3), -1.0, device="cuda")
    refit.register("src", w)
    refit.register("left", out[0])
    refit.register("right", out[1])
    for step in range(3):
        with torch.cuda.stream(stream):
            w.copy_(torch.arange(24, dtype=torch.float32, device="cuda").reshape(4, 6) * (step + 2))
            stats = refit.run(stream=stream) if side_stream else refit.run()
        assert stats.bytes_same_rank == 96
        assert torch.equal(out[0], w[:, :3]) and torch.equal(out[1], w[:, 3:]), step


def test_a_cuda_destination_stored_transformed_receives_its_element_function(session):
    # vLLM's Mamba A = -exp(A_log): bf16 A_log on the GPU into an fp32 A (Shard.transform
    # "neg_exp"), written by the plan's Convert op on the GPU (expf, within 2 ulp of the exact)
    src = ferry.Layout.from_shards([ferry.Shard("A_log", (64,), "bf16", (0,), (64,), 0, "a_log")])
    dst = ferry.Layout.from_shards([ferry.Shard("A_log", (64,), "bf16", (0,), (64,), 0, "A",
                                                "neg_exp")])
    refit = session.refit(src, dst)
    a_log = torch.linspace(-6, 3, 64, device="cuda").to(torch.bfloat16)
    a = torch.zeros(64, device="cuda")
    refit.register("a_log", a_log)
    refit.register("A", a)
    refit.run()
    exact = -torch.exp(a_log.double())
    ulp = torch.abs(exact.float()).nextafter(torch.tensor(float("inf"), device="cuda")) - \
        torch.abs(exact.float())
    assert ((a.double() - exact).abs() <= 2 * ulp.double()).all(), (a, exact)


def test_a_cuda_block_scaled_destination_is_quantized_as_vllm_quantizes_a_checkpoint(session):
    # A bf16 [256, 384] matrix into an fp8 e4m3 parameter and its fp32 scale_inv (vLLM's FP8
    # block-quantized weight, two shards in one buffer as a fused layer's), quantized by the
    # plan's Quantize op on the GPU; the reference is vllm/utils/deep_gemm.py
    # per_block_cast_to_fp8's arithmetic in torch on the CPU: scale_inv = max(amax, 1e-4) / 448
    # per 128x128 block, values (x * (1 / scale_inv)) cast to e4m3 by torch. (On a GPU torch
    # divides a tensor by a Python number as a multiplication by its reciprocal, which can move
    # a scale by an ulp: ferry divides, as the CPU does; the test prints how many moved.)
    src = ferry.Layout.from_shards([ferry.Shard("w", (256, 384), "bf16", (0, 0), (256, 384), 0,
                                                "w_bf16")])
    dst = ferry.Layout.from_shards([
        ferry.Shard("w", (256, 384), "bf16", (0, 0), (128, 384), 0, "w", "fp8_block"),
        ferry.Shard("w", (256, 384), "bf16", (128, 0), (256, 384), 0, "w", "fp8_block"),
        ferry.BlockScaled(0, "w", "w_scale_inv", rows=256, cols=384)])
    g = torch.Generator(device="cuda").manual_seed(7)
    w = torch.randn(256, 384, device="cuda", generator=g).to(torch.bfloat16)
    w[0:128, 128:256] = 0  # an all-zero block: scale_inv 1e-4 / 448
    values = torch.zeros(256, 384, dtype=torch.float8_e4m3fn, device="cuda")
    scales = torch.zeros(2, 3, device="cuda")
    refit = session.refit(src, dst)
    refit.register("w_bf16", w)
    refit.register("w", values)
    refit.register("w_scale_inv", scales)
    refit.run()
    blocks = w.cpu().view(2, 128, 3, 128)
    amax = blocks.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    want_scales = amax / 448.0
    want = (blocks * (1.0 / want_scales)).to(torch.float8_e4m3fn).view(256, 384)
    on_gpu = (amax.cuda() / 448.0).cpu()
    print(f"scales torch computes on the GPU that differ from the CPU's: "
          f"{int((on_gpu != want_scales).sum())} of 6")
    assert torch.equal(scales.cpu(), want_scales.view(2, 3))
    assert torch.equal(values.cpu().view(torch.uint8), want.view(torch.uint8))


def vllm_sm100_reference(w: "torch.Tensor") -> tuple:
    """What vLLM holds of bf16 `w` [rows, cols] as an FP8 layer under DeepGEMM with E8M0 scales
    on SM100, computed in torch on the CPU: the checkpoint quantized as vllm/utils/deep_gemm.py
    per_block_cast_to_fp8 quantizes it, requantized by fp8_utils.py requant_weight_ue8m0_inplace
    (dequantized in fp32, scale_inv 2^ceil(log2(max(amax, 1e-4) / 448)) a 128x128 block), the
    scales packed as DeepGEMM packs them on SM100 (deep_gemm_layout.deep_gemm_sm100_transform).
    Returns (e4m3 values [rows, cols], int32 words [rows, P] with strides [1, N4])."""
    rows, cols = w.shape
    block_rows, block_cols = (rows + 127) // 128, (cols + 127) // 128
    x = torch.zeros(block_rows * 128, block_cols * 128)
    x[:rows, :cols] = w.cpu().float()
    view = x.view(block_rows, 128, block_cols, 128)
    s = view.abs().amax(dim=(1, 3), keepdim=True).clamp(1e-4) / 448.0
    dequantized = (view * (1.0 / s)).to(torch.float8_e4m3fn).float() * s
    amax = dequantized.abs().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    scale = torch.pow(2.0, torch.ceil(torch.log2(amax / 448.0)))
    values = (dequantized * (1.0 / scale)).to(torch.float8_e4m3fn).view(x.shape)[:rows, :cols]
    return values, deep_gemm_sm100_transform(scale.view(block_rows, block_cols), rows, cols,
                                             (1, 128, 128), 1)


def test_a_cuda_fp8_layer_receives_deep_gemms_packed_codes_as_vllm_keeps_them_on_sm100(session):
    # A [258, 640] FP8 layer as vLLM keeps it for DeepGEMM with E8M0 scales on Blackwell: its
    # scales an int32 [258, 2] tensor with strides [1, 260] (rows padded to 4), in storage of
    # 2 x 260 words here (DeepGEMM's torch path allocates them all), registered as ferry.vllm
    # registers it (block_scaled: the whole storage, flat) and written by the Quantize op on the
    # GPU, padding rows and bytes 0.
    from types import SimpleNamespace

    from ferry._vllm_fp8 import block_scaled
    rows, cols = 258, 640
    storage = torch.full((2 * 260,), -1, dtype=torch.int32, device="cuda")
    layer = SimpleNamespace(
        weight=torch.zeros(rows, cols, dtype=torch.float8_e4m3fn, device="cuda"),
        weight_scale_inv=storage.as_strided((rows, 2), (1, 260)))
    scaled, scales = block_scaled("proj", layer, "weight", "ue8m0_packed", rank=0)
    src = ferry.Layout.from_shards([ferry.Shard("w", (rows, cols), "bf16", (0, 0), (rows, cols),
                                                0, "w_bf16")])
    dst = ferry.Layout.from_shards([ferry.Shard("w", (rows, cols), "bf16", (0, 0), (rows, cols),
                                                0, "proj.weight", "fp8_block"), scaled])
    g = torch.Generator(device="cuda").manual_seed(11)
    w = (torch.randn(rows, cols, device="cuda", generator=g) * 3).to(torch.bfloat16)
    w[128:256, 0:128] = 0  # an all-zero block: scale 2^-22
    refit = session.refit(src, dst)
    refit.register("w_bf16", w)
    refit.register("proj.weight", layer.weight)
    refit.register("proj.weight_scale_inv", scales)
    refit.run()
    values, words = vllm_sm100_reference(w)
    got = storage.cpu().view(2, 260)
    assert torch.equal(layer.weight.cpu().view(torch.uint8), values.view(torch.uint8))
    assert torch.equal(got[:, :rows], words.t()) and not got[:, rows:].any()


def test_cupy_and_dlpack_arrays_register_zero_copy(session):
    cupy = pytest.importorskip("cupy")
    refit = session.refit(*layouts())
    w = cupy.arange(24, dtype=cupy.float32).reshape(4, 6)
    left, right = torch.zeros(4, 3, device="cuda"), torch.zeros(4, 3, device="cuda")
    refit.register("src", w)  # __cuda_array_interface__
    refit.register("left", DlpackOnly(left))
    refit.register("right", DlpackOnly(right))
    refit.run()
    expected = torch.arange(24, dtype=torch.float32, device="cuda").reshape(4, 6)
    assert torch.equal(left, expected[:, :3]) and torch.equal(right, expected[:, 3:])


def test_cuda_registration_errors_name_the_buffer():
    session = one_rank_session()
    refit = session.refit(*layouts())
    with pytest.raises(ValueError, match="'src'.*not contiguous"):
        refit.register("src", torch.zeros(6, 8, device="cuda").t()[:, :4])
    with pytest.raises(TypeError, match="'src' holds fp32.*fp16"):
        refit.register("src", torch.zeros(48, dtype=torch.float16, device="cuda"))
    with pytest.raises(ValueError, match="'src'.*40 bytes.*needs 96"):
        refit.register("src", torch.zeros(10, device="cuda"))
    cupy = pytest.importorskip("cupy")
    with pytest.raises(ValueError, match="'src'.*not C-contiguous"):
        refit.register("src", cupy.zeros((6, 8), cupy.float32).T[:, :4])
    managed = cupy.cuda.malloc_managed(96)  # a MemoryPointer to managed memory
    with pytest.raises(ValueError, match="'src'.*managed"):
        refit.register("src", cupy.ndarray((24,), cupy.float32, managed))
    session.finish()


@pytest.mark.parametrize("scenario,ranks", [("2to2", 4), ("4to2", 6)])
def test_cuda_refit_across_processes(scenario, ranks):
    results = run_ranks(lambda rank, port: [WORKER, scenario, "cuda", str(rank), str(port)],
                        ranks, deadline_s=120)
    assert_all_ok(results)
    for r in results:
        assert f"rank {r.rank} step 2: ok" in r.output, r.output
