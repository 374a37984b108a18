"""The HTTP side of a served model (models/served.py): one client per server, as a real client
behaves — a bounded number of requests in flight, a timeout per request, retries with exponential
backoff (honouring `Retry-After`) on 429, 5xx, timeouts and dropped connections, and an API key
read from an environment variable, sent as a bearer header and never written anywhere.

What a failure becomes:
- a server that cannot be reached any more (connection refused or dropped on every try) is
  `ModelUnavailable` (models/contract.py): the run stops in one line, keeps what it committed, and
  a rerun resumes from the cache;
- a request still refused after its retries (429/5xx/timeouts), or answered with a client error,
  is `ServedError`: that question's error (errors are not cached, so a rerun asks again).
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from finbench.models.contract import ModelUnavailable

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_BACKOFF_S = 8.0


class ServedError(RuntimeError):
    """One request the server did not answer usably (after its retries): that question's error."""


@dataclass(frozen=True)
class ClientSettings:
    """How requests are sent: `in_flight` at most at once, each with `timeout` seconds and up to
    `retries` retries `backoff`, 2×`backoff`, … seconds apart (capped at MAX_BACKOFF_S)."""

    in_flight: int = 4
    timeout: float = 600.0
    retries: int = 4
    backoff: float = 0.5


class ServedClient:
    """JSON over HTTP to one server (`base_url` ends in /v1). Thread-safe: `map` runs calls in a
    pool of `settings.in_flight` threads sharing one connection pool."""

    def __init__(self, base_url: str, settings: ClientSettings, api_key: str | None = None) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.settings = settings
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=settings.in_flight, max_keepalive_connections=settings.in_flight)
        self._http = httpx.Client(headers=headers, timeout=settings.timeout, limits=limits)

    def close(self) -> None:
        self._http.close()

    # ---- one request ----------------------------------------------------------------------------
    def get(self, path: str) -> Any:
        return self._send("GET", path, None)

    def post(self, path: str, body: dict[str, Any], root: bool = False) -> Any:
        """POST `body` to `path` under the base URL, or (`root`) under the server's root, where vLLM
        serves /tokenize beside /v1."""
        return self._send("POST", path, body, root)

    def exists(self, path: str) -> bool:
        """Whether the server routes POST `path` (an empty body: a 404/405 says no, anything else
        — typically 422, a body it refuses — says yes); nothing is computed."""
        response = self._attempt("POST", path, {})
        return response.status_code not in (404, 405)

    def _send(self, method: str, path: str, body: dict[str, Any] | None, root: bool = False) -> Any:
        import httpx

        last, last_response = "", None
        for attempt in range(self.settings.retries + 1):
            if attempt:
                time.sleep(self._delay(attempt, last_response))
            last_response = None
            try:
                response = self._attempt(method, path, body, root)
            except httpx.TimeoutException:
                last = f"no answer within {self.settings.timeout:g} s"
                continue
            except httpx.TransportError as err:  # refused, reset, dropped: maybe a restart, maybe gone
                last = f"{type(err).__name__}: {err}"
                if attempt == self.settings.retries:
                    raise ModelUnavailable(f"the server at {self.base_url} stopped answering ({last}, "
                                           f"{attempt + 1} tries)") from None
                continue
            if response.status_code in RETRY_STATUS:
                last, last_response = f"HTTP {response.status_code}", response
                continue
            if response.status_code >= 400:
                raise ServedError(f"{method} {path}: HTTP {response.status_code}: {_detail(response)}")
            try:
                return response.json()
            except ValueError:
                raise ServedError(f"{method} {path}: the answer is not JSON") from None
        raise ServedError(f"{method} {path}: {last} after {self.settings.retries + 1} tries")

    def _attempt(self, method: str, path: str, body: dict[str, Any] | None, root: bool = False) -> Any:
        base = self.base_url.removesuffix("/v1") if root else self.base_url
        return self._http.request(method, base + path, json=body)

    def _delay(self, attempt: int, response: Any) -> float:
        """Exponential backoff, or the server's `Retry-After` (seconds) when it gives one."""
        delay = self.settings.backoff * 2 ** (attempt - 1)
        if response is not None:
            try:
                delay = float(response.headers.get("retry-after", delay))
            except ValueError:
                pass
        return min(max(delay, 0.0), MAX_BACKOFF_S)

    # ---- many requests --------------------------------------------------------------------------
    def map(self, call: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """`call(item)` for every item, `in_flight` at a time; each result or the exception it
        raised, in order. `ModelUnavailable` from any call is raised (the others are cancelled).
        Ctrl-C raises `Interrupted` carrying the results finished by then (position → result)."""
        if not items:
            return []
        pool = ThreadPoolExecutor(max_workers=min(self.settings.in_flight, len(items)))
        futures: list[Future] = [pool.submit(call, item) for item in items]
        try:
            pending = set(futures)
            while pending:  # woken by the first failure too: a dead server ends the batch at once
                _, pending = wait(pending, return_when=FIRST_EXCEPTION)
                if any(isinstance(f.exception(), ModelUnavailable) for f in futures if f.done()):
                    raise next(f.exception() for f in futures if f.done()
                               and isinstance(f.exception(), ModelUnavailable))
        except KeyboardInterrupt:
            done = {k: f.result() for k, f in enumerate(futures) if f.done() and f.exception() is None}
            raise Interrupted(done) from None
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return [f.exception() or f.result() for f in futures]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during `ServedClient.map`, with the results finished by then (position → result)."""

    def __init__(self, done: dict[int, Any]) -> None:
        super().__init__()
        self.done = done


def _detail(response: Any) -> str:
    """The first line of an error answer's detail (FastAPI's `detail`, OpenAI's `error.message`)."""
    try:
        data = response.json()
    except ValueError:
        return (response.text or "").strip().splitlines()[0][:300] if response.text.strip() else ""
    detail = data.get("detail") or data.get("error") or data if isinstance(data, dict) else data
    if isinstance(detail, dict):
        detail = detail.get("message", detail)
    return str(detail).splitlines()[0][:300]
