"""ferry.sglang against SGLang's own classes: a Megatron-style trainer (2 ranks) refits an SGLang
DeepSeek-V3 server through ferry.sglang.Sender and ferry.sglang.load_weights, three updates; after
each, every server parameter and the MLA tensors post_load_weights derives must equal what
SGLang's own load_weights makes of that update's checkpoint (python/tests/sglang_refit_worker.py).
Three servers, one after the other: TP2 PP2 with attention DP 2 and the NextN draft (4 ranks, SGLang
0.5.23's DeepseekV3ForCausalLM with its shared expert fused; PP rank 0 holds the dense layer, PP
rank 1 the MoE layer and DeepseekV3ForCausalLMNextN beside it; the trainer holds the MTP layer),
TP2 with attention DP 2 and no draft (2 ranks), and TP2 of an FP8 block-quantized DeepSeek-V3
checkpoint (quant=fp8_block), which the refit quantizes from the trainer's bf16 and SGLang's FP8
methods process after each update as on Hopper (sglang_harness.hopper_fp8_processing), and two
TP2 EP2 servers under EPLB whose experts SGLang's own EPLB code rebalances before the second
update, each server its own way: every rank must plan again then, and only then, and SGLang's
own loader, following the new maps, is the reference. Skipped, saying so, without the
environment tools/deps/vllm-venv.sh makes.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from procs import run_ranks
from sglang_harness import MODELS
from sglang_refit_worker import SERVERS
from test_sglang_layout import sglang_python

WORKER = os.path.join(os.path.dirname(__file__), "sglang_refit_worker.py")


@pytest.mark.parametrize("server", ["pp_draft", "tp", "tp_fp8", "ep_eplb"])
def test_sglang_server_receives_every_update_byte_exact(tmp_path, server):
    python = sglang_python()
    model, _, _, _, server_ranks = SERVERS[server]
    (tmp_path / "config.json").write_text(json.dumps(MODELS[model][0]))
    roles = [("trainer", 0), ("trainer", 1)] + [("server", r) for r in range(server_ranks)]

    def argv(rank, port):
        role, role_rank = roles[rank]
        return [WORKER, server, role, str(role_rank), str(port), str(tmp_path)]

    results = run_ranks(argv, len(roles), deadline_s=600, python=python)
    failed = [f"--- {roles[r.rank]} exited {r.returncode}:\n{r.output[-3000:]}"
              for r in results if r.returncode != 0]
    assert not failed, "\n".join(failed)
    for r in results[2:]:
        for step in range(3):
            assert re.search(rf"server rank {roles[r.rank][1]} step {step}: \d+ tensors byte-exact",
                             r.output), r.output[-3000:]
    if server == "ep_eplb":
        planned_again(results, roles)


def planned_again(results, roles) -> None:
    """Trainer rank 0 and each server's leading rank (server ranks 0 and 2) planned again once,
    between the first and the second update."""
    for r in results:
        role, rank = roles[r.rank]
        if (role, rank) not in (("trainer", 0), ("server", 0), ("server", 2)):
            continue
        assert r.output.count("planning again") == 1, r.output[-3000:]
        done = r"trainer rank 0 step {}: sent" if role == "trainer" else \
            rf"server rank {rank} step {{}}: \d+ tensors byte-exact"
        first, second = (re.search(done.format(step), r.output).start() for step in (0, 1))
        assert first < r.output.index("planning again") < second, r.output[-3000:]
