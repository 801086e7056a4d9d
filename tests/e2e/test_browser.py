"""A page of another origin (127.0.0.1, another port) in headless Chromium (Debian's, driven by Playwright)
against a real `petrecords serve` with that origin allowed: it runs the example of
docs/how-to/browser-application.md, so creates a pet with fetch, reads its ETag and Location, replaces it with
If-Match, sees the 412 of the stale tag, follows the live feed with EventSource and a ticket, receives the change
of a write made elsewhere, and is refused the ticket used twice."""

from __future__ import annotations

import contextlib
import http.server
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import ConsoleMessage, sync_playwright

from tests.e2e.debian import program
from tests.e2e.servers import Server, free_port, running_server

pytestmark = pytest.mark.slow

ALICE = "alice@example.com"
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "browser-application.md"
# As the machine's notes say Chromium must start here: no sandbox as root, and none of its own network traffic.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGE = b"<!doctype html><html><head><meta charset='utf-8'><title>A front end</title></head><body></body></html>"


def _example() -> str:
    """The JavaScript example of the how-to, as a reader would paste it."""
    blocks = re.findall(r"```js\n(.*?)```", EXAMPLE.read_text(), re.S)
    assert len(blocks) == 1, "the how-to has one JavaScript example"
    return blocks[0]


@contextlib.contextmanager
def _page_server() -> Iterator[str]:
    """A page of its own origin, as a front end's development server serves it."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Server, str]]:
    """The page's origin and a server on SQLite that allows it: what the page does and sees does not depend on the
    database. The live changes of both databases, from one worker's write to another's stream, are
    test_live_changes.py's."""
    with _page_server() as origin:
        settings = {"PETRECORDS_CORS_ORIGINS": origin, "PETRECORDS_EVENTS_KEEP_ALIVE_SECONDS": "1"}
        with running_server(tmp_path / "data", workers=2, users=[ALICE], settings=settings) as server:
            yield server, origin


def test_a_page_of_another_origin_uses_the_api_and_follows_its_changes(served: tuple[Server, str]) -> None:
    server, origin = served
    chromium = program("chromium", package="chromium")
    token = server.tokens[ALICE]
    logged: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on("console", lambda message: _keep(logged, message))
            page.goto(origin)
            found = page.evaluate(
                f"""async ([api, token]) => {{
                    {_example()}
                    await new Promise((resolve) => {{ changes.onopen = resolve; }});
                    window.changes = changes;
                    const stale = await fetch(api + location, {{
                      method: "PUT", headers: {{ ...headers, "If-Match": etag }},
                      body: JSON.stringify({{ name: "Rex III", petType: "Dog" }}),
                    }});
                    const again = await fetch(`${{api}}/v1/changes?ticket=${{encodeURIComponent(ticket)}}`,
                      {{ headers: {{ Accept: "text/event-stream" }} }});
                    return {{
                      created: created.status, replaced: replaced.status, stale: stale.status,
                      staleCode: (await stale.json()).code, again: again.status,
                      location, etag, requestId: created.headers.get("X-Request-ID"),
                    }};
                }}""",
                [server.url, token],
            )
            elsewhere = httpx.post(
                f"{server.url}/v1/pets",
                json={"name": "Written elsewhere", "petType": "Cat"},
                headers={"Authorization": f"Bearer {token}"},
            )
            deadline = time.monotonic() + 10
            while not any("Written elsewhere" in line for line in logged) and time.monotonic() < deadline:
                page.wait_for_timeout(100)
            page.evaluate("() => window.changes.close()")
        finally:
            browser.close()

    assert (found["created"], found["replaced"]) == (201, 200), found
    assert re.fullmatch(r"/v1/pets/[0-9a-f-]{36}", found["location"]), found
    assert re.fullmatch(r'"[0-9a-f]{20}"', found["etag"]), found
    assert found["requestId"], found
    assert (found["stale"], found["staleCode"]) == (412, 992), found
    assert found["again"] == 401, found
    assert elsewhere.status_code == 201
    assert any(line.startswith("created") and "Written elsewhere" in line for line in logged), logged


def _keep(logged: list[str], message: ConsoleMessage) -> None:
    """What the page logged: the example logs each change it receives, with the record."""
    values = [argument.json_value() for argument in message.args]
    logged.append(" ".join(str(value) for value in values))
