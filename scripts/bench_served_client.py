"""Benchmark of finbench's served-model client against a plain asyncio loop, side by side in one run,
sending the same requests to the same server (a vLLM: scripts/vllm_cpu.sh serves one on a CPU).

The requests: N FinMME single choices of the synthetic set (each its own chart), as finbench reads
them from vLLM — one chat completion continuing the constrained prompt, asking the log-probabilities
of the answer tokens' ids (`logprob_token_ids`). Both sides send the same bodies, IN_FLIGHT at a time
(finbench's default for vLLM: 64):
- finbench: `ServedModel.score_options` on the prepared batch (models/served.py): the bodies built,
  sent by its thread pool over one httpx connection pool with retries, read back to option scores;
  its answer memo is emptied before each repetition (the images are encoded beforehand, as the
  runner's worker threads do);
- plain: the same bodies (built beforehand) through one `httpx.AsyncClient`, an asyncio semaphore of
  IN_FLIGHT, `response.json()`; a dropped connection retried (uvicorn closes idle keep-alive
  connections after 5 s, and one can close as it is reused: without a retry such a loop fails).
The two alternate, after one warm-up round each; the last line is `ratio: X.XX` (finbench's median
seconds over the plain loop's; 1.00 = as fast).

    python scripts/bench_served_client.py --url http://127.0.0.1:PORT/v1 [--n 256] [--repeat 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from finbench.benchmarks import finmme
from finbench.core.types import OPTION_LETTERS
from finbench.models.served import load_served
from finbench.models.served_bodies import token_logprobs_body
from finbench.models.served_engines import ANSWER_TEXTS, CHAT_PATH
from finbench.offline.finmme_synthetic import write_parquet
from finbench.runner.run_requests import model_request

RETRIES = 4  # dropped connections retried at once, as finbench's client retries them (with its backoff)


def requests(n: int) -> list[Any]:
    """The adapter requests of the first `n` single choices of a synthetic FinMME set (images decoded)."""
    with tempfile.TemporaryDirectory() as folder:
        data = write_parquet(Path(folder) / "finmme.parquet", n_items=4 * n, seed=0)
        questions = finmme.load_questions(data, question_types=("single_choice",), limit=n)
        return [model_request(finmme.BENCHMARK, q, "constrained") for q in questions]


def finbench_round(model: Any, inputs: Any, letters: torch.Tensor) -> float:
    model._answered.clear()  # each round sends every request
    start = time.perf_counter()
    scores = model.score_options(inputs, letters)
    seconds = time.perf_counter() - start
    assert scores.shape == (inputs["finbench_rows"].__len__(), len(OPTION_LETTERS))
    return seconds


async def plain_round(url: str, bodies: list[dict[str, Any]], in_flight: int) -> float:
    import httpx

    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        gate = asyncio.Semaphore(in_flight)

        async def one(body: dict[str, Any]) -> Any:
            async with gate:
                for attempt in range(RETRIES + 1):  # a keep-alive connection the server closed as it was reused
                    try:
                        response = await client.post(url + CHAT_PATH, json=body)
                        break
                    except httpx.TransportError:
                        if attempt == RETRIES:
                            raise
                response.raise_for_status()
                return response.json()

        start = time.perf_counter()
        answers = await asyncio.gather(*(one(body) for body in bodies))
        seconds = time.perf_counter() - start
    assert len(answers) == len(bodies)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the server, http://HOST:PORT/v1")
    parser.add_argument("--n", type=int, default=256, help="requests per round")
    parser.add_argument("--repeat", type=int, default=7, help="timed rounds of each client")
    parser.add_argument("--in-flight", type=int, default=None, help="requests in flight (default: finbench's for the server)")
    args = parser.parse_args()
    model = load_served(args.url, in_flight=args.in_flight)
    in_flight = model.in_flight
    inputs = model.prepare(requests(args.n))
    rows = inputs["finbench_rows"]
    letters = torch.tensor(model.single_token_ids(list(OPTION_LETTERS) + [" " + c for c in OPTION_LETTERS])).reshape(2, -1)
    bodies = [token_logprobs_body(model.model_id, row, model.vocabulary.asked, "", model.thinking) for row in rows]
    print(f"server {model.server} at {args.url}, model {model.model_id}, reading {model.reading}; {len(rows)} requests "
          f"of {len(model.vocabulary.asked)} token ids, {in_flight} in flight; {len(ANSWER_TEXTS)} answer texts")
    finbench_round(model, inputs, letters)  # warm-up: connections, the server's caches
    asyncio.run(plain_round(args.url, bodies, in_flight))
    ours, plain = [], []
    for _ in range(args.repeat):
        ours.append(finbench_round(model, inputs, letters))
        plain.append(asyncio.run(plain_round(args.url, bodies, in_flight)))
    for name, times in (("finbench client", ours), ("plain asyncio loop", plain)):
        print(f"{name}: {statistics.median(times):.3f} s median, {min(times):.3f} s best of {len(times)} "
              f"({len(rows) / statistics.median(times):.0f} requests/s)")
    print(f"ratio: {statistics.median(ours) / statistics.median(plain):.2f}")


if __name__ == "__main__":
    main()
