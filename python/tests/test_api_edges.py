"""What a torch user meets first when something is wrong: ferry's errors carry its message
without C++ status names and input it refuses is a ValueError too; every public function has a
docstring; timeouts, sides, layouts and fragment views refuse bad values by name."""

import inspect
import math

import numpy as np
import pytest

import ferry
from procs import free_port

CONFIG = {"deadline.connect": "20s", "deadline.refit": "20s"}


def test_refused_input_is_a_value_error_with_ferrys_message_and_a_code():
    with pytest.raises(ferry.InvalidArgumentError) as bad_model:
        ferry.Layout.preset("no-such-model", "megatron:tp=2")
    assert isinstance(bad_model.value, ValueError) and isinstance(bad_model.value, ferry.FerryError)
    assert str(bad_model.value).startswith("unknown model preset 'no-such-model'")
    assert bad_model.value.code == "not_found"
    with pytest.raises(ValueError, match=r"^in 'megatron:tp=0': bad value '0' for tp") as bad_tp:
        ferry.Layout.preset("llama-3.1-8b", "megatron:tp=0")
    assert bad_tp.value.code == "invalid_argument"


def test_describe_config_refuses_what_a_plan_or_session_would():
    with pytest.raises(ferry.InvalidArgumentError, match="'planner.hierarchical': 'maybe' is not"):
        ferry.describe_config({"planner.hierarchical": "maybe"})
    with pytest.raises(ValueError, match="option 'deadline.abort' is 0.000000 s"):
        ferry.describe_config({"deadline.abort": "0s"})
    assert "planner.hierarchical = false" in ferry.describe_config({"planner.hierarchical": False})


def test_other_failures_stay_ferry_errors_without_status_names(tmp_path):
    with pytest.raises(ferry.FerryError) as missing:
        ferry.Layout.load(tmp_path / "missing.yaml")
    assert not isinstance(missing.value, ValueError)
    assert missing.value.code == "io_error"
    assert str(missing.value).startswith("cannot open layout or topology file")
    assert "IO_ERROR" not in str(missing.value)


def test_every_public_function_and_method_has_a_docstring():
    undocumented = []
    for name in ferry.__all__:
        obj = getattr(ferry, name)
        members = [(name, obj)]
        if inspect.isclass(obj) and not issubclass(obj, tuple):
            members += [(f"{name}.{m}", getattr(obj, m)) for m in dir(obj)
                        if not m.startswith("_") and not issubclass(obj, BaseException)]
        for label, member in members:
            if (callable(member) or isinstance(member, property)) and not inspect.getdoc(member):
                undocumented.append(label)
    assert undocumented == []


def test_wrong_argument_types_name_the_argument_not_the_compiled_signature():
    for call, expected in (
            (lambda: ferry.Layout.preset("llama-3.1-8b", "megatron:tp=2", first_rank="2"),
             "first_rank must be an integer, got str"),
            (lambda: ferry.Layout.preset(None, "megatron:tp=2"), "model must be a str, got NoneType"),
            (lambda: ferry.Layout.from_yaml(b"tensors: []"), "text must be a str, got bytes"),
            (lambda: ferry.Layout.from_yaml("tensors: []").fragments(rank=0.5),
             "rank must be an integer, got float")):
        with pytest.raises(TypeError, match=expected) as error:
            call()
        assert "incompatible function arguments" not in str(error.value)
    with pytest.raises(ValueError, match="first_rank 1099511627776 is not a rank"):
        ferry.Layout.preset("llama-3.1-8b", "megatron:tp=2", first_rank=2**40)
    layout = ferry.Layout.preset("llama-3.1-8b", "megatron:tp=2", scale="1/64",
                                 first_rank=np.int64(2))
    assert layout.ranks == [2, 3] and layout.fragments(np.int32(3))


def test_plan_and_refit_take_layouts_only():
    dst = ferry.Layout.preset("llama-3.1-8b", "vllm:tp=1", scale="1/64", first_rank=1)
    with pytest.raises(TypeError, match="src must be a ferry.Layout, got str"):
        ferry.plan("llama-3.1-8b", dst)


@pytest.fixture
def refit():
    session = ferry.Session(rank=0, world_size=1, store=f"127.0.0.1:{free_port()}", token="t",
                            config=CONFIG)
    src = ferry.Layout.from_shards([ferry.Shard("w", (4, 6), "fp32", (0, 0), (4, 6), 0, "src")])
    dst = ferry.Layout.from_shards([ferry.Shard("w", (4, 6), "fp32", (0, 0), (4, 6), 0, "dst")])
    r = session.refit(src, dst)
    yield r
    session.finish()


def test_timeouts_must_be_positive_seconds(refit):
    w, out = np.arange(24, dtype=np.float32), np.zeros(24, np.float32)
    refit.register("src", w)
    refit.register("dst", out)
    for bad in (-1, 0, math.nan, math.inf):
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds above 0"):
            refit.run(timeout=bad)
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds above 0"):
            refit.session.recreate(timeout=bad)
    with pytest.raises(TypeError, match="timeout must be a number of seconds, got str"):
        refit.run(timeout="5")
    refit.run(timeout=10)
    np.testing.assert_array_equal(out, w)


def test_register_names_the_allowed_sides(refit):
    with pytest.raises(ValueError, match="side must be 'source' or 'destination', got 'src'"):
        refit.register("src", np.zeros(24, np.float32), side="src")


def test_fragment_view_names_unknown_dtypes_and_short_arrays():
    layout = ferry.Layout.from_shards([ferry.Shard("w", (4, 6), "fp32", (0, 0), (4, 6), 0, "b")])
    fragment = layout.fragments(0)[0]
    with pytest.raises(ValueError, match="unknown dtype 'float33'.*bf16"):
        ferry.fragment_view(np.zeros(24, np.float32), fragment, "float33")
    with pytest.raises(ValueError, match="buffer 'b' ends at byte 96, but the array holds 40 bytes"):
        ferry.fragment_view(np.zeros(10, np.float32), fragment, "fp32")
    view = ferry.fragment_view(np.arange(24, dtype=np.float32), fragment, "fp32")
    assert view.shape == (4, 6) and view[3, 5] == 23


def test_a_parameter_rebound_or_reallocated_after_registration_is_named():
    # what ferry.vllm and ferry.sglang check before each update: an engine that rebinds a
    # parameter's data (replace_parameter with another shape, a reload) leaves ferry's
    # registration pointing at memory the parameter no longer uses
    torch = pytest.importorskip("torch")
    from ferry._arrays import moved_parameters, param_storage
    a, b, c = (torch.nn.Parameter(torch.zeros(4, 4)) for _ in range(3))
    bound = [(n, p, param_storage(p)) for n, p in (("a", a), ("b", b), ("c", c))]
    a.data.copy_(torch.ones(4, 4))  # written in place: where it was
    b.data = torch.zeros(4, 4)  # rebound to new memory
    c.data = c.data.t()  # same memory, other strides
    assert moved_parameters(bound) == ["b", "c"]
