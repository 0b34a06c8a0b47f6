"""ferry.vllm.FerryHTTPClient against an HTTP server on 127.0.0.1 that records what it is sent:
a draft session, as send_weights(draft=True) drives it, must reach the route a `vllm serve`
server has for it (/start_draft_weight_update, vllm/entrypoints/rl/online/api_router.py), then
/update_weights with the update's round and draft flag, then /finish_weight_update. Run by
test_vllm.py with the vLLM environment's python; prints "http client: ok" and exits 0, or
raises."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import ferry.vllm

POSTS: list[tuple[str, dict]] = []


class Recorder(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        POSTS.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"message": "ok"}')

    def log_message(self, *args):
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = ferry.vllm.FerryHTTPClient(f"http://127.0.0.1:{server.server_address[1]}", timeout=30)
    update = {"round": 4, "draft": True}  # what send_weights(draft=True) sends
    client.start_draft_weight_update()
    client.update_weights(update)
    client.finish_weight_update()
    server.shutdown()
    assert POSTS == [("/start_draft_weight_update", None),
                     ("/update_weights", {"update_info": update}),
                     ("/finish_weight_update", None)], POSTS
    print("http client: ok", flush=True)


if __name__ == "__main__":
    main()
