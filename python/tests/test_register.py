"""Refit.register and Refit.run in one process: a one-rank session whose source and destination
both live on rank 0 (a local copy), the checks on what is registered, and two sessions in one
process on two threads (which joins and runs only because ferry releases the GIL while it waits)."""

import threading

import numpy as np
import pytest

import ferry
from procs import free_port

# Short deadlines: a test that would hang fails within seconds instead.
CONFIG = {"deadline.connect": "20s", "deadline.refit": "20s"}


def layouts(dst_rank=0):
    src = ferry.Layout.from_shards([ferry.Shard("w", (4, 6), "fp32", (0, 0), (4, 6), 0, "src")])
    dst = ferry.Layout.from_shards([
        ferry.Shard("w", (4, 6), "fp32", (0, 0), (4, 3), dst_rank, "left"),
        ferry.Shard("w", (4, 6), "fp32", (0, 3), (4, 6), dst_rank, "right")])
    return src, dst


def one_rank_session():
    return ferry.Session(rank=0, world_size=1, store=f"127.0.0.1:{free_port()}", token="t",
                         config=CONFIG)


@pytest.fixture
def session():
    s = one_rank_session()
    yield s
    s.finish()


def test_a_destination_stored_transformed_receives_its_element_function(session):
    # vLLM's Mamba A = -exp(A_log) in fp32 (Shard.transform "neg_exp"), split over two buffers:
    # the plan's Convert op writes it (the host's expf, within an ulp of the exact value)
    src = ferry.Layout.from_shards([ferry.Shard("A_log", (8,), "fp32", (0,), (8,), 0, "a_log")])
    dst = ferry.Layout.from_shards([
        ferry.Shard("A_log", (8,), "fp32", (0,), (4,), 0, "A0", "neg_exp"),
        ferry.Shard("A_log", (8,), "fp32", (4,), (8,), 0, "A1", "neg_exp")])
    refit = session.refit(src, dst)
    a_log = np.linspace(-3, 2, 8, dtype=np.float32)
    a = np.zeros((2, 4), np.float32)
    refit.register("a_log", a_log)
    refit.register("A0", a[0])
    refit.register("A1", a[1])
    refit.run()
    exact = -np.exp(a_log.astype(np.float64))
    ulps = np.abs(a.reshape(-1) - exact) / np.spacing(np.abs(exact).astype(np.float32))
    assert (ulps <= 1).all(), (a, exact)
    with pytest.raises(TypeError, match="'A0' holds fp32 elements, the array is fp16"):
        refit.register("A0", np.zeros(8, np.float16))  # its 16 bytes, of another dtype


@pytest.mark.parametrize("scale_fmt,second_scale,second_value", [
    ("float32", np.float32(1) / np.float32(448), 0x7E),  # 1.0 * 448 = 448: e4m3 0x7e
    ("ue8m0", np.float32(2.0**-8), 0x78)])               # 2^ceil(log2(1/448)); 256: e4m3 0x78
def test_a_block_scaled_destination_receives_fp8_values_and_their_scales(
        session, scale_fmt, second_scale, second_value):
    # A [256, 128] fp32 matrix in two 128x128 blocks, quantized as vLLM's per_block_cast_to_fp8:
    # block 0 has amax 896, so scale_inv = 896 / 448 = 2, and 896 -> 448 (e4m3 0x7e), -3 -> -1.5
    # (0xbc); block 1 holds one 1.0 (its row 72). The destination holds it as two shards in one
    # buffer, as vLLM's fused layers do.
    src = ferry.Layout.from_shards([ferry.Shard("w", (256, 128), "fp32", (0, 0), (256, 128), 0,
                                                "src")])
    dst = ferry.Layout.from_shards([
        ferry.Shard("w", (256, 128), "fp32", (0, 0), (128, 128), 0, "w8", "fp8_block"),
        ferry.Shard("w", (256, 128), "fp32", (128, 0), (256, 128), 0, "w8", "fp8_block"),
        ferry.BlockScaled(0, "w8", "w8_scale_inv", rows=256, cols=128, scale_fmt=scale_fmt)])
    assert dst.stored_dtypes == {"w": "fp8_e4m3"}
    assert [(b.name, b.bytes) for b in dst.buffers()] == [("w8", 256 * 128), ("w8_scale_inv", 8)]
    w = np.zeros((256, 128), np.float32)
    w[0, 0], w[1, 1], w[200, 5] = 896, -3, 1
    values, scales = np.full((256, 128), 0x55, np.uint8), np.zeros(2, np.float32)
    refit = session.refit(src, dst)
    refit.register("src", w)
    refit.register("w8", values)
    with pytest.raises(TypeError, match="'w8_scale_inv' holds fp32 elements"):
        refit.register("w8_scale_inv", np.zeros(2, np.int32))
    refit.register("w8_scale_inv", scales)
    refit.run()
    want = np.zeros((256, 128), np.uint8)
    want[0, 0], want[1, 1], want[200, 5] = 0x7E, 0xBC, second_value
    np.testing.assert_array_equal(values, want)
    np.testing.assert_array_equal(scales, np.array([2.0, second_scale], np.float32))


def test_block_scaled_buffers_must_match_their_shards():
    shard = ferry.Shard("w", (256, 128), "bf16", (0, 0), (256, 128), 0, "w8", "fp8_block")
    with pytest.raises(ValueError, match="'w8' on rank 0 holds fp8_block shards but no "
                                         "block_scaled entry names it"):
        ferry.Layout.from_shards([shard])
    with pytest.raises(ValueError, match="scale_fmt 'e8m0' is not float32, ue8m0 or "
                                         "ue8m0_packed"):
        ferry.Layout.from_shards([shard, ferry.BlockScaled(0, "w8", "s", 256, 128,
                                                           scale_fmt="e8m0")])
    with pytest.raises(ValueError, match="also holds shards without transform 'fp8_block'"):
        ferry.Layout.from_shards([shard, ferry.Shard("b", (4,), "bf16", (0,), (4,), 0, "w8"),
                                  ferry.BlockScaled(0, "w8", "s", 256, 128)])
    with pytest.raises(ValueError, match=r"1 x \[128, 128\] fp8 matrices do not match its "
                                         "shards' 32768 bytes"):
        ferry.Layout.from_shards([shard, ferry.BlockScaled(0, "w8", "s", 128, 128)])
    with pytest.raises(ValueError, match="do not match"):  # sizes past int64 saturate, refused
        ferry.Layout.from_shards([shard, ferry.BlockScaled(0, "w8", "s", 2**62, 2**62)])


def test_local_refit_writes_the_callers_arrays(session):
    src, dst = layouts()
    refit = session.refit(src, dst)
    w = np.arange(24, dtype=np.float32).reshape(4, 6)
    left, right = np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32)
    refit.register("src", w)
    refit.register("left", left)
    refit.register("right", right)
    for step in range(3):
        w[...] = np.arange(24).reshape(4, 6) * (step + 1)
        stats = refit.run()
        assert stats.bytes_same_rank == 96 and stats.seconds >= 0
        np.testing.assert_array_equal(left, w[:, :3])
        np.testing.assert_array_equal(right, w[:, 3:])


def test_run_takes_the_callers_stream_and_refuses_what_is_not_one(session):
    src, dst = layouts()
    refit = session.refit(src, dst)
    w = np.arange(24, dtype=np.float32).reshape(4, 6)
    left, right = np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32)
    for name, array in (("src", w), ("left", left), ("right", right)):
        refit.register(name, array)

    class TorchLikeStream:  # what run() reads of a torch.cuda.Stream
        cuda_stream = 0

    assert refit.run(stream=TorchLikeStream()).bytes_same_rank == 96  # host arrays: unused
    np.testing.assert_array_equal(right, w[:, 3:])
    for bad in ("default", -1, 1.5, True):
        with pytest.raises(TypeError, match="stream must be"):
            refit.run(stream=bad)


def test_registration_errors_name_the_buffer():
    # A failed run aborts the session's communicator: this one-rank session is dropped after it
    # without the final barrier (no other rank waits for it).
    session = one_rank_session()
    refit = session.refit(*layouts())
    with pytest.raises(KeyError, match="nope"):
        refit.register("nope", np.zeros(24, np.float32))
    with pytest.raises(ValueError, match="'src'.*40 bytes.*needs 96"):
        refit.register("src", np.zeros(10, np.float32))
    with pytest.raises(ValueError, match="not C-contiguous"):
        refit.register("src", np.zeros((6, 8), np.float32).T[:, :4])
    with pytest.raises(TypeError, match="fp32.*fp64|fp32"):
        refit.register("src", np.zeros(24, np.float64))
    with pytest.raises(TypeError, match="numpy array, a torch tensor, or an array with"):
        refit.register("src", [0.0] * 24)
    refit.register("src", np.zeros(96, np.uint8))  # raw bytes are accepted
    with pytest.raises(ferry.FerryError, match="left"):
        refit.run()  # "left" and "right" are unregistered


def test_torch_tensors_register_zero_copy(session):
    torch = pytest.importorskip("torch")
    refit = session.refit(*layouts())
    w = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    out = torch.zeros(2, 4, 3)
    with pytest.raises(ValueError, match="not contiguous"):
        refit.register("src", w.t())
    with pytest.raises(TypeError, match="bf16|fp32"):
        refit.register("src", torch.zeros(48, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="meta tensor; ferry moves CPU and CUDA memory"):
        refit.register("src", torch.empty(24, device="meta"))
    refit.register("src", w)
    refit.register("left", out[0])
    refit.register("right", out[1])
    refit.run()
    assert torch.equal(out[0], w[:, :3]) and torch.equal(out[1], w[:, 3:])


class DlpackOnly:
    """An array seen only through DLPack, as JAX's or another library's would be; `device`
    overrides the (device type, id) the array reports."""

    def __init__(self, array, device=None):
        self._array, self._device = array, device

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._device or self._array.__dlpack_device__()


def test_dlpack_arrays_register_zero_copy(session):
    refit = session.refit(*layouts())
    w = np.arange(24, dtype=np.float32).reshape(4, 6)
    left, right = np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32)
    refit.register("src", DlpackOnly(w))
    refit.register("left", DlpackOnly(left))
    refit.register("right", DlpackOnly(right))
    refit.run()
    np.testing.assert_array_equal(left, w[:, :3])
    np.testing.assert_array_equal(right, w[:, 3:])


def test_dlpack_and_cuda_interface_errors_name_the_buffer():
    session = one_rank_session()
    refit = session.refit(*layouts())
    with pytest.raises(ValueError, match="'src'.*not C-contiguous"):
        refit.register("src", DlpackOnly(np.zeros((6, 8), np.float32).T[:, :4]))
    with pytest.raises(TypeError, match="'src' holds fp32.*int32"):
        refit.register("src", DlpackOnly(np.zeros(24, np.int32)))
    with pytest.raises(ValueError, match="'src': DLPack device type 4"):
        refit.register("src", DlpackOnly(np.zeros(24, np.float32), device=(4, 0)))
    host = np.zeros(24, np.float32)

    class HostPretendingCuda:
        __cuda_array_interface__ = {"shape": (24,), "typestr": "<f4", "version": 3,
                                    "data": (host.ctypes.data, False), "strides": None}

    # Without a GPU: no device is visible; with one: the pointer is not device memory.
    with pytest.raises(ValueError, match="'src': __cuda_array_interface__ memory: .*"
                                         "(no CUDA device|not device memory)"):
        refit.register("src", HostPretendingCuda())
    session.finish()


def test_two_sessions_on_two_threads_release_the_gil():
    src, dst = layouts(dst_rank=1)
    port = free_port()
    outputs = {0: np.zeros((4, 3), np.float32), 1: np.zeros((4, 3), np.float32)}
    w = np.arange(24, dtype=np.float32).reshape(4, 6)
    errors = []

    def rank_main(rank):
        try:
            with ferry.Session(rank=rank, world_size=2, store=f"127.0.0.1:{port}", token="t",
                               config=CONFIG) as s:
                refit = s.refit(src, dst)
                if rank == 0:
                    refit.register("src", w)
                else:
                    refit.register("left", outputs[0])
                    refit.register("right", outputs[1])
                refit.run()
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a rank did not finish within 60 s"
    assert not errors, errors
    np.testing.assert_array_equal(outputs[0], w[:, :3])
    np.testing.assert_array_equal(outputs[1], w[:, 3:])


def test_from_env_names_the_missing_variable(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ferry.FerryError, match="RANK|rank"):
        ferry.Session.from_env()


def test_session_store_must_be_host_and_port():
    with pytest.raises(ValueError, match="host:port"):
        ferry.Session(rank=0, world_size=1, store="localhost")


def test_recreate_with_rank_zero_hosting_the_store_says_once_that_rank_0_cannot_be_replaced(session, capfd):
    session.recreate(timeout=20)
    session.recreate(timeout=20)
    err = capfd.readouterr().err
    assert err.count("rank 0 hosts the store (FERRY_STORE_EXTERNAL is not set), so rank 0 cannot be replaced") == 1, err
