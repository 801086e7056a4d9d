"""The certificate's web page in headless Chromium (Debian's, driven by Playwright) at a phone's size (390x844),
served with its Content-Security-Policy: no horizontal scroll, every fact visible, no request beyond the page
itself, and no violation of the policy (its style applies, so the policy's hash is the style's)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from petrecords.certificates.labels import dose_facts, pet_facts, validity
from petrecords.certificates.page import CONTENT_SECURITY_POLICY, render_page
from tests.certificates.support import DAY_MS, NOW_MS, dose_row, facts_of, many_doses, pet_row, vaccine_row
from tests.e2e.debian import program
from tests.e2e.servers import free_port
from tests.e2e.test_browser import CHROMIUM_ARGS

pytestmark = pytest.mark.slow

LONG_CLINIC = "Clinique vétérinaire du Parc de la Tête d'Or, 1 boulevard des Belges, 69006 Lyon, France" * 3
HOSTILE = "<script>document.title='ran'</script><img src=https://example.com/x.png>"


def _facts() -> Any:
    doses = many_doses(12)
    doses.append(
        (
            dose_row(NOW_MS - 3 * DAY_MS, clinic=LONG_CLINIC, lot_number="LOT-" + "9" * 40, veterinarian=HOSTILE),
            vaccine_row("Nobivac Rabies", "Rabies"),
        )
    )
    return facts_of(pet_row(name="Shadowfax the Unbelievably Long-Named قطة", breed=HOSTILE), doses)


@contextlib.contextmanager
def _serving(page: bytes) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/public/certificates/token":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_phone_shows_every_fact_and_nothing_leaves_the_page() -> None:
    chromium = program("chromium", package="chromium")
    facts = _facts()
    requests: list[str] = []
    console: list[str] = []
    with _serving(render_page(facts).encode()) as origin, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=3, is_mobile=True)
            page.on("request", lambda request: requests.append(request.url))
            page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
            page.goto(f"{origin}/public/certificates/token", wait_until="load")
            found = page.evaluate(
                """() => ({
                    scrollWidth: document.documentElement.scrollWidth,
                    innerWidth: window.innerWidth,
                    title: document.title,
                    widest: Math.max(...[...document.querySelectorAll('body *')].map(
                        (element) => element.getBoundingClientRect().right)),
                    background: getComputedStyle(document.body).backgroundColor,
                    text: document.body.innerText,
                })"""
            )
            hidden = [
                value
                for value in {value for _, value in (*validity(facts), *pet_facts(facts.pet))}
                if not page.get_by_text(value, exact=True).first.is_visible()
            ]
        finally:
            browser.close()

    assert found["scrollWidth"] <= found["innerWidth"] == 390, found
    assert found["widest"] <= 390, found
    assert found["background"] == "rgb(243, 244, 246)", "the inline style did not apply: its hash is not the policy's"
    assert found["title"].startswith("Certificate of vaccination"), found["title"]
    assert requests == [f"{origin}/public/certificates/token"], requests
    assert not [line for line in console if "Content Security Policy" in line or "error" in line], console
    assert not hidden, hidden
    text = " ".join(found["text"].split())
    missing = [
        value for dose in facts.vaccinations for value in dose_facts(dose) if " ".join(value.split()) not in text
    ]
    assert not missing, missing
    assert HOSTILE in text
