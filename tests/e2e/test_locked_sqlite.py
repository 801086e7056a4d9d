"""End to end: a real server whose SQLite database another process keeps locked.

Writes wait for the lock (up to busy_timeout) and then answer 503; meanwhile the process goes on serving
everything else. (Its statements run on the event loop, so a wait inside SQLite would stall it all.)
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pysqlite3.dbapi2 as sqlite3
import pytest

from tests.e2e.servers import Server, running_server

pytestmark = pytest.mark.slow

BUSY_TIMEOUT_SECONDS = 3.0
# Far below busy_timeout, far above what these requests take on a loaded machine.
PROMPT_SECONDS = 1.5
# The access log's times are whole milliseconds.
LOG_RESOLUTION_SECONDS = 0.002
# How often the other requests are sent again while the writes wait.
ROUND_SECONDS = 0.05


def _timed(http: httpx.Client, method: str, path: str, **options: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = http.request(method, path, **options)
    return response, time.monotonic() - started


def _served(server: Server) -> dict[str, tuple[float, float]]:
    """When the server began and finished each request, by request id, as its access log says."""
    spans = {}
    for line in server.output(full=True).splitlines():
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        if entry.get("logger") == "petrecords.access":
            finished = datetime.datetime.fromisoformat(entry["time"]).timestamp()
            spans[entry["request_id"]] = (finished - entry["duration_ms"] / 1000, finished)
    return spans


def test_writes_waiting_for_the_lock_stall_nothing_else(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    settings = {"PETRECORDS_SQLITE_BUSY_TIMEOUT_MS": str(int(BUSY_TIMEOUT_SECONDS * 1000))}
    with running_server(data_dir, users=["alice@example.com"], settings=settings) as server:
        headers = {"Authorization": f"Bearer {server.tokens['alice@example.com']}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30.0) as http:
            created = http.post("/v1/pets", json={"name": "Rex", "petType": "Dog"})
            assert created.status_code == 201, created.text
            others = ["/healthz", f"/v1/pets/{created.json()['id']}", "/readyz"]

            holder = sqlite3.connect(data_dir / "petrecords.sqlite3", isolation_level=None)
            try:
                holder.execute("BEGIN EXCLUSIVE")
                with ThreadPoolExecutor(max_workers=3) as pool:
                    writes = [
                        pool.submit(
                            _timed,
                            http,
                            "POST",
                            "/v1/pets",
                            json={"name": f"W{n}", "petType": "Cat"},
                            headers={"X-Request-ID": f"write-{n}"},
                        )
                        for n in range(3)
                    ]
                    # The other requests, again and again until the writes are answered: the server's log
                    # then tells which of them it served while every write was waiting.
                    rounds: list[list[tuple[str, httpx.Response, float]]] = []
                    while not all(write.done() for write in writes):
                        round_ = []
                        for number, path in enumerate(others):
                            request_id = f"other-{len(rounds)}-{number}"
                            response, seconds = _timed(http, "GET", path, headers={"X-Request-ID": request_id})
                            round_.append((request_id, response, seconds))
                        rounds.append(round_)
                        concurrent.futures.wait(writes, timeout=ROUND_SECONDS)
                    write_results = [write.result() for write in writes]
            finally:
                holder.close()

            for round_ in rounds:
                for _, response, seconds in round_:
                    assert response.status_code == 200, response.text
                    assert seconds < PROMPT_SECONDS, f"{response.request.url.path} took {seconds:.1f} s"
            for response, seconds in write_results:
                assert response.status_code == 503, response.text
                assert response.json()["code"] == 986
                assert response.headers["Retry-After"]
                # Each waited for busy_timeout, side by side rather than one after another.
                assert BUSY_TIMEOUT_SECONDS * 0.9 <= seconds < BUSY_TIMEOUT_SECONDS * 2
            after = http.post("/v1/pets", json={"name": "Tom", "petType": "Cat"})
            assert after.status_code == 201, after.text

        served = _served(server)
        waiting_from = max(served[f"write-{n}"][0] for n in range(3)) - LOG_RESOLUTION_SECONDS
        waiting_until = min(served[f"write-{n}"][1] for n in range(3)) + LOG_RESOLUTION_SECONDS
        while_waiting = [
            round_ for round_ in rounds if all(waiting_from <= served[request_id][0] for request_id, _, _ in round_)
        ]
        assert while_waiting, "no round of other requests was served while all three writes waited for the lock"
        assert all(served[request_id][1] <= waiting_until for request_id, _, _ in while_waiting[0])
