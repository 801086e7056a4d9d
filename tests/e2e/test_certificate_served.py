"""A certificate's link, as a real `petrecords serve` answers it, in headless Chromium (Debian's, driven by
Playwright) at a phone's size (390x844): the page shows the pet and its dose without a horizontal scroll, asks for
nothing beyond itself, breaks none of the policy it is served with, and comes with `no-store` and `no-referrer`;
the same link's PDF is one page that names the pet, its chip and its dose."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import sync_playwright
from pypdf import PdfReader

from tests.e2e.debian import program
from tests.e2e.servers import running_server
from tests.e2e.test_browser import CHROMIUM_ARGS

pytestmark = pytest.mark.slow

ALICE = "alice@example.com"
ADMIN = "admin@example.com"
DAY_MS = 86_400_000


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _issued(url: str, tokens: dict[str, str]) -> str:
    """A certificate of a dog with one rabies dose; its link."""

    def post(path: str, body: dict[str, Any], user: str) -> dict[str, Any]:
        response = httpx.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {tokens[user]}"})
        assert response.status_code == 201, response.text
        created: dict[str, Any] = response.json()
        return created

    vaccine = post("/v1/vaccines", {"name": "Nobivac Rabies", "petType": "Dog", "duration": 365}, f"{ADMIN} --admin")
    pet = post("/v1/pets", {"name": "Zoë Ñandú", "petType": "Dog", "microchip": "982000123456789"}, ALICE)
    applied = _iso(int(time.time() * 1000) - 10 * DAY_MS)
    dose = {"petId": pet["id"], "vaccineId": vaccine["id"], "appliedAt": applied, "lotNumber": "RB-2291"}
    post("/v1/pet-vaccination", {**dose, "clinic": "Clinique vétérinaire du Parc, 69006 Lyon"}, ALICE)
    link: str = post("/v1/pet-certificates", {"petId": pet["id"]}, ALICE)["link"]
    return link


def test_a_phone_shows_the_served_page_and_the_pdf_reads_back(tmp_path: Path) -> None:
    chromium = program("chromium", package="chromium")
    with running_server(tmp_path / "data", users=[ALICE, f"{ADMIN} --admin"]) as server:
        link = f"{server.url}{_issued(server.url, server.tokens)}"
        requests: list[str] = []
        console: list[str] = []
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=3, is_mobile=True)
                page.on("request", lambda request: requests.append(request.url))
                page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
                response = page.goto(link, wait_until="load")  # with the browser's own Accept
                assert response is not None
                headers = response.headers
                found = page.evaluate(
                    """() => ({
                        scrollWidth: document.documentElement.scrollWidth,
                        innerWidth: window.innerWidth,
                        background: getComputedStyle(document.body).backgroundColor,
                        text: document.body.innerText,
                    })"""
                )
            finally:
                browser.close()
        pdf = httpx.get(link, headers={"Accept": "application/pdf"})

    assert headers["cache-control"] == "no-store", headers
    assert headers["referrer-policy"] == "no-referrer", headers
    assert headers["content-security-policy"].startswith("default-src 'none'"), headers
    assert requests == [link], requests
    assert not [line for line in console if "Content Security Policy" in line or "error" in line], console
    assert found["scrollWidth"] <= found["innerWidth"] == 390, found
    assert found["background"] == "rgb(243, 244, 246)", "the inline style did not apply"
    for expected in ("Zoë Ñandú", "982000123456789", "Nobivac Rabies", "RB-2291"):
        assert expected in found["text"], expected
    assert pdf.status_code == 200
    reader = PdfReader(io.BytesIO(pdf.content))
    assert len(reader.pages) == 1
    text = reader.pages[0].extract_text()
    for expected in ("Zoë Ñandú", "982000123456789", "Nobivac Rabies", "RB-2291", "Lyon"):
        assert expected in text, expected


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget(tmp_path: Path) -> None:
    settings = {"PETRECORDS_PUBLIC_RATE_LIMIT": "2", "PETRECORDS_TRUSTED_PROXIES": "127.0.0.0/8"}
    with running_server(tmp_path / "data", settings=settings) as server:
        jwks = f"{server.url}/.well-known/jwks.json"

        def status(forwarded: str) -> int:
            return httpx.get(jwks, headers={"X-Forwarded-For": forwarded}).status_code

        # The right-most entry that is no trusted proxy is the client; what it says of itself counts for nothing.
        assert [status("192.0.2.1"), status("198.51.100.7, 192.0.2.1"), status("192.0.2.1")] == [200, 200, 429]
        assert [status("192.0.2.2"), status("192.0.2.2, 127.0.0.9")] == [200, 200]
        limited = httpx.get(jwks, headers={"X-Forwarded-For": "192.0.2.2"})
        assert limited.status_code == 429
        assert limited.headers["retry-after"]
        assert limited.headers["cache-control"] == "no-store"
