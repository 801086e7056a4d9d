"""The public answer's own parts: which form an `Accept` asks for, and the PDFs kept by what they print."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import msgspec
import pytest

from petrecords.app import create_app
from petrecords.certificates import document
from petrecords.certificates.facts import CertificateFacts
from petrecords.certificates.public import HTML, JOSE, JSON, PDF, PrintedCertificates, chosen_form
from petrecords.config import ConfigurationError, Settings
from petrecords.values import format_timestamp
from tests.certificates.support import NOW_MS, facts_of, many_doses, pet_row
from tests.support import SECRET


@pytest.mark.parametrize(
    ("accept", "form"),
    [
        (None, JSON),
        ("", JSON),
        ("*/*", JSON),
        ("image/png", JSON),
        ("application/pdf", PDF),
        ("Application/PDF", PDF),
        ("application/jose", JOSE),
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", HTML),
        ("application/pdf;q=0.5, text/html", HTML),
        ("text/html;q=0, application/json", JSON),
        ("text/html;q=oops", JSON),
    ],
)
def test_the_form_an_accept_asks_for(accept: str | None, form: str) -> None:
    assert chosen_form(accept) == form


async def test_a_pdf_is_made_again_only_when_what_it_prints_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []
    render = document.render_pdf
    monkeypatch.setattr(document, "render_pdf", lambda facts: made.append(facts) or render(facts))
    printed = PrintedCertificates(entries=2)
    facts = facts_of(doses=many_doses(3))
    minute = NOW_MS - NOW_MS % 60_000

    def as_of(moment: int) -> CertificateFacts:
        return msgspec.structs.replace(facts, as_of=format_timestamp(moment))

    first = await printed.document(as_of(minute))
    # The same minute: the same document, made once.
    assert await printed.document(as_of(minute + 59_999)) == first
    assert len(made) == 1
    # Another minute, another pet's name: made anew.
    await printed.document(as_of(minute + 60_000))
    await printed.document(msgspec.structs.replace(as_of(minute), pet=facts_of(pet_row(name="Fido")).pet))
    assert len(made) == 3
    # At most `entries` kept: the oldest went.
    await printed.document(as_of(minute))
    assert len(made) == 4


def test_a_signing_key_that_cannot_be_used_stops_the_start_up(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, auth_secret=SECRET, signing_key="-----BEGIN PRIVATE KEY-----\nnot a key")

    with pytest.raises(ConfigurationError, match="PETRECORDS_SIGNING_KEY"):
        create_app(settings)


def test_the_signing_key_is_made_with_the_application(tmp_path: Path) -> None:
    create_app(Settings(data_dir=tmp_path, auth_secret=SECRET))

    assert (tmp_path / "signing-key.pem").stat().st_mode & 0o777 == 0o600


async def test_a_pdf_asked_for_by_many_at_once_is_made_once(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []
    render = document.render_pdf
    monkeypatch.setattr(document, "render_pdf", lambda facts: made.append(facts) or render(facts))
    printed = PrintedCertificates()
    facts = facts_of(doses=many_doses(3))

    answers = await asyncio.gather(*(printed.document(facts) for _ in range(8)))

    assert len(made) == 1
    assert len(set(answers)) == 1
    assert await printed.document(facts) == answers[0]
    assert len(made) == 1


async def test_every_pdf_of_a_process_is_made_on_its_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each thread keeps what it parsed of the fonts: on asyncio's pool, every one parsed them again.
    threads: set[str] = set()
    render = document.render_pdf
    monkeypatch.setattr(
        document, "render_pdf", lambda facts: threads.add(threading.current_thread().name) or render(facts)
    )
    printings = [PrintedCertificates() for _ in range(2)]
    pets = [facts_of(pet_row(name=f"Rex {number}"), doses=many_doses(2)) for number in range(6)]

    await asyncio.gather(*(printed.document(facts) for printed in printings for facts in pets))

    assert len(threads) == 1
    assert threads.pop().startswith("certificate-pdf")
