"""What a torch user meets first when something is wrong: ferry's errors carry its message
without C++ status names, and input it refuses is a ValueError too."""

import numpy as np
import pytest

import ferry


def test_refused_input_is_a_value_error_with_ferrys_message_and_a_code():
    with pytest.raises(ferry.InvalidArgumentError) as bad_model:
        ferry.Layout.preset("no-such-model", "megatron:tp=2")
    assert isinstance(bad_model.value, ValueError) and isinstance(bad_model.value, ferry.FerryError)
    assert str(bad_model.value).startswith("unknown model preset 'no-such-model'")
    assert bad_model.value.code == "not_found"
    with pytest.raises(ValueError, match=r"^in 'megatron:tp=0': bad value '0' for tp") as bad_tp:
        ferry.Layout.preset("llama-3.1-8b", "megatron:tp=0")
    assert bad_tp.value.code == "invalid_argument"


def test_other_failures_stay_ferry_errors_without_status_names(tmp_path):
    with pytest.raises(ferry.FerryError) as missing:
        ferry.Layout.load(tmp_path / "missing.yaml")
    assert not isinstance(missing.value, ValueError)
    assert missing.value.code == "io_error"
    assert str(missing.value).startswith("cannot open layout or topology file")
    assert "IO_ERROR" not in str(missing.value)
