"""End to end: a real server whose SQLite database another process keeps locked.

Writes wait for the lock (up to busy_timeout) and then answer 503; meanwhile the process goes on serving
everything else. (Its statements run on the event loop, so a wait inside SQLite would stall it all.)
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pysqlite3.dbapi2 as sqlite3
import pytest

from tests.e2e.servers import running_server

pytestmark = pytest.mark.slow

BUSY_TIMEOUT_SECONDS = 3.0
# Far below busy_timeout, far above what these requests take on a loaded machine.
PROMPT_SECONDS = 1.5


def _timed(http: httpx.Client, method: str, path: str, **options: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = http.request(method, path, **options)
    return response, time.monotonic() - started


def test_writes_waiting_for_the_lock_stall_nothing_else(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    settings = {"PETRECORDS_SQLITE_BUSY_TIMEOUT_MS": str(int(BUSY_TIMEOUT_SECONDS * 1000))}
    with running_server(data_dir, users=["alice@example.com"], settings=settings) as server:
        headers = {"Authorization": f"Bearer {server.tokens['alice@example.com']}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30.0) as http:
            created = http.post("/v1/pets", json={"name": "Rex", "petType": "Dog"})
            assert created.status_code == 201, created.text
            pet = created.json()

            holder = sqlite3.connect(data_dir / "petrecords.sqlite3", isolation_level=None)
            try:
                holder.execute("BEGIN EXCLUSIVE")
                with ThreadPoolExecutor(max_workers=3) as pool:
                    writes = [
                        pool.submit(_timed, http, "POST", "/v1/pets", json={"name": f"W{n}", "petType": "Cat"})
                        for n in range(3)
                    ]
                    time.sleep(0.3)  # the writes are waiting for the lock now
                    others = [
                        _timed(http, "GET", "/healthz"),
                        _timed(http, "GET", f"/v1/pets/{pet['id']}"),
                        _timed(http, "GET", "/readyz"),
                    ]
                    write_results = [write.result() for write in writes]
            finally:
                holder.close()

            for response, seconds in others:
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
