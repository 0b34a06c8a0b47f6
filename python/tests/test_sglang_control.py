"""ferry.sglang's control tensor, the one thing the trainer passes through SGLang's
update_weights_from_tensor: what control_tensors() writes read_control() reads back, and anything
else (another tensor, too many bytes, not a RefitSpec, a field of the wrong type) is refused
naming what is wrong. Needs torch, not SGLang."""

import json

import pytest

torch = pytest.importorskip("torch")
sglang = pytest.importorskip("ferry.sglang")

SPEC = sglang.RefitSpec(store="127.0.0.1:1234", num_trainer_ranks=2, model="/ckpt",
                        source="megatron:tp=2", destination="sglang:tp=2,pp=2", token="t",
                        config={"transport.network": "tcp"}, server=1, round=3)


def control_of(payload: bytes):
    return [(sglang.CONTROL, torch.frombuffer(bytearray(payload), dtype=torch.uint8))]


def test_control_tensor_round_trips():
    assert sglang.read_control(sglang.control_tensors(SPEC)) == SPEC


def test_control_tensor_refuses_what_is_not_a_refit_spec():
    with pytest.raises(ValueError, match="takes the one tensor"):
        sglang.read_control([("model.embed_tokens.weight", torch.zeros(4))])
    with pytest.raises(ValueError, match="over MAX_CONTROL_BYTES"):
        sglang.read_control([(sglang.CONTROL, torch.zeros(sglang.MAX_CONTROL_BYTES + 1,
                                                           dtype=torch.uint8))])
    with pytest.raises(ValueError, match="does not hold a ferry.sglang.RefitSpec"):
        sglang.read_control(control_of(b"\xff\xfe"))
    with pytest.raises(ValueError, match="fields"):
        sglang.read_control(control_of(b"[1, 2]"))
    fields = json.loads(json.dumps(SPEC.__dict__))
    with pytest.raises(ValueError, match="fields"):
        sglang.read_control(control_of(json.dumps({**fields, "extra": 1}).encode()))
    with pytest.raises(ValueError, match="field num_trainer_ranks is '2'"):
        sglang.read_control(control_of(json.dumps({**fields, "num_trainer_ranks": "2"}).encode()))
    with pytest.raises(ValueError, match="field round is True"):
        sglang.read_control(control_of(json.dumps({**fields, "round": True}).encode()))
    del fields["store"]
    with pytest.raises(ValueError, match="store"):
        sglang.read_control(control_of(json.dumps(fields).encode()))


def test_worker_ranks_follow_sglangs_world_order():
    # server 1 of 8 ranks each (tp=2, pp=2, dp=2) after 2 trainer ranks: replica 1, PP rank 1,
    # TP rank 0 is 2 + 8 + (1 * 2 + 1) * 2 + 0
    assert sglang.worker_rank(SPEC, 8, tp_rank=0, tp_size=2, dp_rank=1, pp_rank=1, pp_size=2) == 16
    assert sglang.worker_rank(SPEC, 8, tp_rank=1, tp_size=2, dp_rank=None) == 11
    # attention DP: dp_rank is the attention-DP group (tp_rank // attn_tp_size), inside the one
    # replica of 4 ranks (tp=4, attn_dp=2): TP rank 3 is 2 + 4 + 3
    assert sglang.worker_rank(SPEC, 4, tp_rank=3, tp_size=4, dp_rank=1, attn_dp_size=2) == 9
