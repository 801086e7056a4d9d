"""A certificate's document as the database keeps it (certificates/stored.py): read back, it answers exactly the
facts it was made from, at the time asked; it is served only at the vouch and the due-soon days it was made with,
and before its first state change."""

from __future__ import annotations

from typing import Any

import msgspec

from petrecords.certificates.facts import encode_facts
from petrecords.certificates.recent import Kept
from petrecords.certificates.stored import made, stored_answer, vouch_text
from petrecords.values import format_timestamp
from tests.certificates.support import CERTIFICATE_ID, DAY_MS, NOW_MS, many_doses, pet_row

VERSION = (2, 5, "12:30:1796000000000:1796000000000:12:0")


def _made(due_soon_days: int = 30) -> tuple[Kept, tuple[Any, ...]]:
    answer = made(
        version=VERSION,
        certificate_id=CERTIFICATE_ID,
        issued_at_ms=NOW_MS - DAY_MS,
        expires_at_ms=NOW_MS + 400 * DAY_MS,
        groups=None,
        pet=pet_row(),
        doses=many_doses(12),
        now_ms=NOW_MS,
        due_soon_days=due_soon_days,
    )
    stored = (vouch_text(VERSION, due_soon_days), answer.good_until_ms, answer.head + answer.tail)
    return answer, stored


def test_a_stored_document_answers_the_facts_it_was_made_from() -> None:
    answer, stored = _made()
    later = format_timestamp(NOW_MS + 61_234)

    read = stored_answer(VERSION, stored, due_soon_days=30, now_ms=NOW_MS + 61_234)

    assert read is not None
    facts = answer.facts_as_of(later)
    assert read.json_as_of(later) == encode_facts(facts)
    assert read.facts_as_of(later) == facts
    assert msgspec.json.decode(read.json_as_of(later))["asOf"] == later


def test_it_holds_only_at_its_vouch_and_days_and_before_its_first_state_change() -> None:
    answer, stored = _made()
    good_until = answer.good_until_ms
    # The latest dose is due in a year: its first change is when it turns due-soon, 30 days before.
    assert NOW_MS < good_until < NOW_MS + 365 * DAY_MS

    assert stored_answer(VERSION, stored, due_soon_days=30, now_ms=good_until - 1) is not None
    assert stored_answer(VERSION, stored, due_soon_days=30, now_ms=good_until) is None
    assert stored_answer((3, *VERSION[1:]), stored, due_soon_days=30, now_ms=NOW_MS) is None
    assert stored_answer((2, 5, VERSION[2] + "1"), stored, due_soon_days=30, now_ms=NOW_MS) is None
    assert stored_answer(VERSION, stored, due_soon_days=14, now_ms=NOW_MS) is None
    assert stored_answer(VERSION, (None, None, None), due_soon_days=30, now_ms=NOW_MS) is None
