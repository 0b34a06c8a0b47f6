"""ferry: move sharded tensors between groups of ranks laid out differently (the weight refit
from RL trainers to inference engines), over the library facade core/refit.

    import ferry
    src = ferry.Layout.preset("llama-3.1-8b", "megatron:tp=2", scale="1/64")
    dst = ferry.Layout.preset("llama-3.1-8b", "vllm:tp=1,dp=2", scale="1/64", first_rank=2)
    print(ferry.plan(src, dst).stats)                    # offline, no session

    with ferry.Session.from_env() as session:            # torchrun / mpirun / srun
        refit = session.refit(src, dst)                  # plans once
        for b in src.buffers(session.rank): refit.register(b.name, my_tensors[b.name])
        stats = refit.run()                              # every step

Arrays: numpy, torch tensors on the CPU or a CUDA device, and other libraries' arrays through
__cuda_array_interface__ (CuPy, Numba) or DLPack, all zero-copy. Errors from ferry raise
ferry.FerryError (a RuntimeError) carrying ferry's message, with `code` naming the kind of failure;
input ferry refuses (a spec, a layout, an option, a name) raises ferry.InvalidArgumentError, both a
FerryError and a ValueError.
"""

__version__ = "0.1.0"  # the wheel's version (python/BUILD.bazel, WHEEL_VERSION)

from ._ferry import FerryError, InvalidArgumentError, describe_config
from ._layout import BlockScaled, BufferInfo, FragmentInfo, Layout, Shard, TensorInfo
from ._plan import Plan, Stats, plan
from ._session import Refit, Session
from ._specs import megatron_spec, sglang_spec, vllm_spec
from ._views import fragment_view

__all__ = [
    "BlockScaled", "BufferInfo", "FerryError", "FragmentInfo", "InvalidArgumentError", "Layout",
    "Plan", "Refit", "Session", "Shard", "Stats", "TensorInfo", "describe_config",
    "fragment_view", "megatron_spec", "plan", "sglang_spec", "vllm_spec",
]
