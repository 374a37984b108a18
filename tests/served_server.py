"""Servers on 127.0.0.1 for the served-model tests: a real `transformers serve` started on a free
port with a checkpoint the tests build, waited for until /v1/models answers, stopped by its pid;
and small JSON servers replaying what a real one cannot produce (`Mock`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers import ENV


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    checkpoint: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        """SIGTERM by pid, SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)


def start_server(checkpoint: Path, log: Path, port: int | None = None, timeout: float = 180) -> Server:
    """`transformers serve CHECKPOINT --host 127.0.0.1` (CPU, float32: the in-process runs' dtype),
    up and answering /v1/models."""
    port = port or free_port()
    env = {**ENV, "OMP_NUM_THREADS": "1"}
    handle = open(log, "ab")
    process = subprocess.Popen([sys.executable, "-m", "transformers.cli.transformers", "serve", str(checkpoint),
                                "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32"],
                               stdout=handle, stderr=subprocess.STDOUT, env=env)
    server = Server(process, port, checkpoint, log)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"transformers serve exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/models", timeout=2) as answer:
                if json.loads(answer.read()).get("data"):
                    return server
        except OSError:
            time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"transformers serve did not answer within {timeout} s: {log.read_text()[-2000:]}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


class Mock:
    """A JSON server on 127.0.0.1: `routes[(method, path)]` → callable(body, headers) → (status, json,
    headers); every request is recorded (method, path, body, headers)."""

    def __init__(self, routes):
        self.routes, self.requests = routes, []
        mock = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method):
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"null") if length else None
                mock.requests.append((method, self.path, body, dict(self.headers)))
                route = mock.routes.get((method, self.path))
                status, data, headers = route(body, self.headers) if route else (404, {"detail": "Not Found"}, {})
                payload = json.dumps(data).encode()
                self.send_response(status)
                for key, value in {"content-type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):  # noqa: N802
                self._answer("GET")

            def do_POST(self):  # noqa: N802
                self._answer("POST")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mock():
    """`mock(routes)`: a `Mock` server, closed after the test (import this fixture into the test module)."""
    servers = []

    def make(routes):
        servers.append(Mock(routes))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def models(*entries):
    """A /v1/models route listing (id, owned_by) pairs."""
    return lambda body, headers: (200, {"object": "list", "data": [{"id": i, "owned_by": o, "object": "model"}
                                                                   for i, o in entries]}, {})


# ---- a vLLM-shaped server ------------------------------------------------------------------------
# Its tokenizer spells finbench's answer texts as one token each (ids 100 + position; "\n" 99; the
# chat template ends a turn with 7), and its model answers by rule: after the answer begun so far,
# the next character of "B,D" (log-prob -0.1) or of "12.5" (-0.2), or the end once either is
# complete; every other token -6. A single choice is then B, a set B and D, a number 12.5.
TARGETS = (("B,D", -0.1), ("12.5", -0.2))
OTHER_LOGPROB, END_OF_TURN, NEWLINE = -6.0, 7, 99


def _texts():
    from finbench.models.served_engines import ANSWER_TEXTS

    return ANSWER_TEXTS


def vllm_tokenize(body, headers):
    if "messages" in body:
        return 200, {"tokens": [1, 2, 3] + ([] if body.get("continue_final_message") else [END_OF_TURN, NEWLINE])}, {}
    text = body["prompt"]
    ids = [NEWLINE] if text == "\n" else [100 + _texts().index(text)] if text in _texts() else [5] * len(text)
    return 200, {"tokens": ids, "count": len(ids)}, {}


def rule_logprobs(answered: str) -> dict[int, float]:
    """The rule's log-probability of every token id the tokenizer knows, after `answered`."""
    scores = {100 + k: OTHER_LOGPROB for k in range(len(_texts()))} | {END_OF_TURN: OTHER_LOGPROB, NEWLINE: OTHER_LOGPROB}
    for target, value in TARGETS:
        if answered == target:
            scores[END_OF_TURN] = max(scores[END_OF_TURN], value)
        elif target.startswith(answered):
            token = 100 + _texts().index(target[len(answered)])
            scores[token] = max(scores[token], value)
    return scores


def image_usage(body) -> dict:
    """usage as vLLM reports it with --enable-prompt-tokens-details: each image's tokens depend on its bytes."""
    urls = [p["image_url"]["url"] for m in body.get("messages", []) if isinstance(m.get("content"), list)
            for p in m["content"] if p.get("type") == "image_url"]
    images = sum(4 + len(url) % 13 for url in urls)
    return {"prompt_tokens": 100 + images, "completion_tokens": 1, "total_tokens": 101 + images,
            "prompt_tokens_details": {"cached_tokens": 0, "multimodal_tokens": {"image": images} if urls else None}}


def vllm_chat(body, headers):
    if "logprob_token_ids" not in body:  # generation: a fixed reply
        return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": "The answer is B."},
                                  "finish_reason": "stop"}], "usage": {**image_usage(body), "completion_tokens": 5}}, {}
    last = body["messages"][-1]
    answered = last["content"].removeprefix("Answer:") if last["role"] == "assistant" else ""
    scores = rule_logprobs(answered)
    sampled = max(scores, key=scores.get)
    listed = [sampled] + [i for i in body["logprob_token_ids"] if i != sampled]
    entries = [{"token": f"token_id:{i}", "logprob": scores.get(i, -30.0), "bytes": []} for i in listed]
    return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"},
                              "logprobs": {"content": [{"token": f"token_id:{sampled}", "logprob": scores[sampled],
                                                        "top_logprobs": entries}]}, "finish_reason": "length"}],
                 "usage": image_usage(body), "system_fingerprint": "vllm-mock"}, {}


def vllm_routes(decision=None):
    """The routes of a vLLM server serving "served/tiny"; `decision` answers its /v1/systemone
    (default: 501, as vLLM for a Qwen-VL model)."""
    refused = lambda body, headers: (501, {"error": {"message": "The model does not support the structured decision "
                                                                "API", "type": "NotImplementedError", "code": 501}}, {})
    return {("GET", "/v1/models"): models(("served/tiny", "vllm")), ("POST", "/tokenize"): vllm_tokenize,
            ("POST", "/v1/chat/completions"): vllm_chat, ("POST", "/v1/systemone"): decision or refused}
