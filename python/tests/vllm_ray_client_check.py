"""ferry.vllm.FerryRayClient against two Ray actors of a class built on vLLM's own
RLOfflineMixin (vllm/entrypoints/rl/offline.py, the weight-sync methods of vLLM's `LLM`), on a
local Ray runtime: a draft session, as send_weights(draft=True) drives it, must reach each
actor's start_draft_weight_update, then update_weights with the update's round and draft flag,
then finish_weight_update, each as the collective_rpc to its workers that vLLM's mixin makes.
The engine behind each actor records those calls (no vLLM engine runs here). Run by
test_vllm.py with the vLLM environment's python; prints "ray client: ok" and exits 0, or
raises."""

from __future__ import annotations

import ray
from vllm.entrypoints.rl.offline import RLOfflineMixin

import ferry.vllm


class RecordingEngine:
    """What RLOfflineMixin calls on `llm_engine`, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def collective_rpc(self, method: str, kwargs: dict | None = None) -> None:
        self.calls.append((method, kwargs))

    def set_weight_version(self, version: str) -> None:
        self.calls.append(("set_weight_version", version))


@ray.remote
class Replica(RLOfflineMixin):
    """A vLLM data-parallel replica as an RL stack holds it: an actor with LLM's weight-sync
    methods (vLLM's own), over a recording engine."""

    def __init__(self) -> None:
        self.llm_engine = RecordingEngine()

    def calls(self) -> list[tuple[str, object]]:
        return self.llm_engine.calls


def main() -> None:
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        replicas = [Replica.remote() for _ in range(2)]
        client = ferry.vllm.FerryRayClient(replicas)
        update = {"round": 4, "draft": True}  # what send_weights(draft=True) sends
        client.start_draft_weight_update()
        client.update_weights(update)
        client.finish_weight_update(weight_version="step-4")
        calls = ray.get([r.calls.remote() for r in replicas])
    finally:
        ray.shutdown()
    want = [("start_draft_weight_update", None),
            ("update_weights", {"update_info": update}),
            ("finish_weight_update", None),
            ("set_weight_version", "step-4")]
    assert calls == [want, want], calls
    print("ray client: ok", flush=True)


if __name__ == "__main__":
    main()
