"""ferry.sglang's control tensor, the one thing the trainer passes through SGLang's
update_weights_from_tensor: what control_tensors() writes read_control() reads back, and anything
else (another tensor, too many bytes, not a RefitSpec, a field of the wrong type) is refused
naming what is wrong; and update_server, which runs SGLang's weight-update session through an
Engine or a server's URL (a local HTTP server answering as SGLang's does). Needs torch, not
SGLang."""

import base64
import http.server
import json
import pickle
import threading
from dataclasses import replace

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
    # server 1 of 4 ranks each (tp=2, pp=2) after 2 trainer ranks: PP rank 1, TP rank 0 is
    # 2 + 4 + 1 * 2 + 0
    assert sglang.worker_rank(SPEC, 4, tp_rank=0, tp_size=2, pp_rank=1, pp_size=2) == 8
    assert sglang.worker_rank(SPEC, 4, tp_rank=1, tp_size=2) == 7
    # attention DP adds no ranks: TP rank 3 of tp=4, attn_dp=2 is 2 + 4 + 3
    assert sglang.worker_rank(SPEC, 4, tp_rank=3, tp_size=4) == 9


def test_servers_of_several_replicas_are_refused():
    # SGLang 0.5.23 asserts dp_size == 1 in update_weights_from_tensor; refused before any layout
    # is built or any rank joins
    spec = replace(SPEC, destination="sglang:tp=2,dp=2,engines=2")
    with pytest.raises(ValueError, match=r"several replicas \(dp > 1\).*engines=N"):
        sglang.Sender(spec, rank=0)


class Engine:
    """What update_server calls of an sglang.Engine, answering as SGLang 0.5.23's Engine does
    ((success, message)) or its HTTP server does ({"success": ..., "message": ...})."""

    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def _answer(self, step):
        self.calls.append(step)
        return self.answers.get(step, (True, "Success"))

    def begin_weight_update(self):
        return self._answer("begin")

    def update_weights_from_tensor(self, named_tensors, load_format=None):
        assert load_format == sglang.LOAD_FORMAT and named_tensors[0][0] == sglang.CONTROL
        return self._answer("update")

    def end_weight_update(self):
        return self._answer("end")


def test_update_server_runs_sglangs_weight_update_session():
    engine = Engine({})
    sglang.update_server(engine, sglang.control_tensors(SPEC))
    assert engine.calls == ["begin", "update", "end"]


def test_update_server_raises_sglangs_message_and_closes_the_session():
    engine = Engine({"update": (False, "Failed to update parameter online")})
    with pytest.raises(RuntimeError, match="update_weights_from_tensor failed: Failed to update"):
        sglang.update_server(engine, sglang.control_tensors(SPEC))
    assert engine.calls == ["begin", "update", "end"]
    engine = Engine({"begin": {"success": False, "message": "a session is already open"}})
    with pytest.raises(RuntimeError, match="begin_weight_update failed: a session is already"):
        sglang.update_server(engine, sglang.control_tensors(SPEC))
    assert engine.calls == ["begin"]
    engine = Engine({"end": {"success": False, "message": "no session is open"}})
    with pytest.raises(RuntimeError, match="end_weight_update failed: no session is open"):
        sglang.update_server(engine, sglang.control_tensors(SPEC))


class SglangEndpoints(http.server.BaseHTTPRequestHandler):
    """SGLang's three weight-update endpoints as entrypoints/http_server.py answers them:
    {"success": ..., "message": ...}, HTTP 400 when success is false; `failing` names the one
    that fails; another path is not found (404). Each request is recorded as (endpoint, JSON body, Authorization header)."""

    failing: str = ""
    oversized = False  # answer more than MAX_ANSWER_BYTES
    requests: list = []

    def do_POST(self):
        endpoint = self.path.strip("/")
        if endpoint not in ("begin_weight_update", "update_weights_from_tensor",
                            "end_weight_update"):
            self.send_error(404)
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append((endpoint, body, self.headers.get("Authorization")))
        ok = endpoint != self.failing
        message = "x" * sglang.MAX_ANSWER_BYTES if self.oversized else "Success"
        answer = json.dumps({"success": ok, "message": message if ok else "it failed"})
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def sglang_server():
    SglangEndpoints.requests, SglangEndpoints.failing = [], ""
    SglangEndpoints.oversized = False
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SglangEndpoints)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(timeout=10)


def test_update_server_posts_the_control_by_value_to_a_servers_url(sglang_server):
    sglang.update_server(sglang_server, sglang.control_tensors(SPEC), api_key="k", timeout=30)
    steps = [(endpoint, auth) for endpoint, _, auth in SglangEndpoints.requests]
    assert steps == [("begin_weight_update", "Bearer k"), ("update_weights_from_tensor", "Bearer k"),
                     ("end_weight_update", "Bearer k")]
    body = SglangEndpoints.requests[1][1]
    assert body["load_format"] == sglang.LOAD_FORMAT and body["flush_cache"] is True
    # one payload per TP rank of SPEC's sglang:tp=2,pp=2, each the control pickled by value
    assert len(body["serialized_named_tensors"]) == 2
    for entry in body["serialized_named_tensors"]:
        assert sglang.read_control(pickle.loads(base64.b64decode(entry))) == SPEC


def test_update_server_raises_a_servers_refusal_and_closes_the_session(sglang_server):
    SglangEndpoints.failing = "update_weights_from_tensor"
    with pytest.raises(RuntimeError, match="update_weights_from_tensor failed: it failed"):
        sglang.update_server(sglang_server, sglang.control_tensors(SPEC), timeout=30)
    assert [r[0] for r in SglangEndpoints.requests][-1] == "end_weight_update"
    with pytest.raises(RuntimeError, match=r"begin_weight_update failed: HTTP 404"):
        sglang.update_server(sglang_server + "/no/such/prefix", sglang.control_tensors(SPEC),
                             timeout=30)


def test_a_servers_draft_and_the_destinations_must_agree():
    sglang.check_draft(SPEC, None)
    draft = replace(SPEC, destination="sglang:tp=2,mtp=1")
    sglang.check_draft(draft, "EAGLE")  # NEXTN, as SGLang resolves it
    with pytest.raises(ValueError, match="runs no speculative decoding"):
        sglang.check_draft(draft, None)
    with pytest.raises(ValueError, match=r"runs speculative decoding \(EAGLE\).*mtp=1"):
        sglang.check_draft(SPEC, "EAGLE")


def test_parameters_sglang_changed_after_loading_are_refused():
    fp8 = "sglang:tp=2,quant=fp8_block"
    scales = torch.nn.Parameter(torch.ones(2, 2), requires_grad=False)
    sglang.check_as_loaded("w.weight_scale_inv", scales, fp8)
    scales.format_ue8m0 = True  # requant_block_scale_ue8m0_for_deepgemm's mark (SM100/SM120)
    with pytest.raises(ValueError, match="w.weight_scale_inv: SGLang requantized these block "
                                         "scales to UE8M0.* SGLANG_ENABLE_JIT_DEEPGEMM=0"):
        sglang.check_as_loaded("w.weight_scale_inv", scales, fp8)
    experts = torch.nn.Parameter(torch.zeros(2, 4, 4), requires_grad=False)
    experts.is_shuffled = True
    with pytest.raises(ValueError, match="w13_weight: a kernel preshuffled"):
        sglang.check_as_loaded("w13_weight", experts, "sglang:tp=2")
    if hasattr(torch, "float8_e4m3fn"):  # torch >= 2.1
        weight = torch.zeros(4, 4, dtype=torch.float8_e4m3fn)
        sglang.check_as_loaded("o_proj.weight", weight, fp8)
        with pytest.raises(ValueError, match="o_proj.weight holds FP8 weights.*quant=fp8_block"):
            sglang.check_as_loaded("o_proj.weight", weight, "sglang:tp=2")


def test_update_server_refuses_what_is_not_an_answer(sglang_server):
    engine = Engine({"update": None})
    with pytest.raises(RuntimeError, match="answered None, not"):
        sglang.update_server(engine, sglang.control_tensors(SPEC))
    SglangEndpoints.oversized = True
    with pytest.raises(RuntimeError, match="begin_weight_update failed: an answer over"):
        sglang.update_server(sglang_server, sglang.control_tensors(SPEC), timeout=30)
