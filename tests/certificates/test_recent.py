"""The kept answers of links (certificates/recent.py): the JSON filled with each answer's own time is the JSON of the
facts at that time, byte for byte; a kept answer holds only at its version and before its end; the process keeps a
bounded amount."""

from __future__ import annotations

import msgspec

from petrecords.certificates.facts import encode_facts
from petrecords.certificates.recent import RecentCertificates, kept, next_state_change
from petrecords.values import format_timestamp
from tests.certificates.support import DAY_MS, NOW_MS, facts_of, many_doses


def test_the_json_of_a_kept_answer_is_the_facts_at_the_time_asked() -> None:
    facts = facts_of(doses=many_doses(12))
    answer = kept(1, facts, good_until_ms=NOW_MS + DAY_MS)
    later = format_timestamp(NOW_MS + 61_234)

    assert answer.json_as_of(later) == encode_facts(msgspec.structs.replace(facts, as_of=later))
    assert answer.facts_as_of(later).as_of == later
    assert answer.facts_as_of(later).vaccinations == facts.vaccinations


def test_a_kept_answer_holds_at_its_version_and_before_its_end() -> None:
    recent = RecentCertificates()
    recent.keep("a", kept(("v", 1), facts_of(), good_until_ms=NOW_MS + 10))

    assert recent.get("a", version=("v", 1), now_ms=NOW_MS + 9) is not None
    assert recent.get("a", version=("v", 2), now_ms=NOW_MS) is None
    assert "a" not in recent  # dropped: a version once moved does not come back
    recent.keep("a", kept(("v", 2), facts_of(), good_until_ms=NOW_MS + 10))
    assert recent.get("a", version=("v", 2), now_ms=NOW_MS + 10) is None


def test_a_process_keeps_a_bounded_amount_the_least_asked_for_dropped_first() -> None:
    one = kept(1, facts_of(doses=many_doses(5)), good_until_ms=NOW_MS + DAY_MS)
    recent = RecentCertificates(most_bytes=one.size * 2)
    for digest in ("a", "b"):
        recent.keep(digest, one)
    assert recent.get("a", version=1, now_ms=NOW_MS) is not None

    recent.keep("c", one)

    assert ("a" in recent, "b" in recent, "c" in recent) == (True, False, True)
    too_big = RecentCertificates(most_bytes=one.size - 1)
    too_big.keep("a", one)
    assert "a" not in too_big


def test_the_facts_hold_until_a_dose_turns_due_soon_or_overdue() -> None:
    soon = 30 * DAY_MS
    due = NOW_MS + 40 * DAY_MS

    assert next_state_change([due], now_ms=NOW_MS, due_soon_ms=soon) == due - soon
    assert next_state_change([due], now_ms=due - soon, due_soon_ms=soon) == due
    assert next_state_change([due, NOW_MS + DAY_MS], now_ms=NOW_MS, due_soon_ms=soon) == NOW_MS + DAY_MS
    assert next_state_change([due], now_ms=due, due_soon_ms=soon) is None
    assert next_state_change([], now_ms=NOW_MS, due_soon_ms=soon) is None


def test_an_answer_holds_unread_only_while_the_data_version_its_vouch_last_held_at() -> None:
    recent = RecentCertificates()
    recent.keep("a", kept(("v", 1), facts_of(), good_until_ms=NOW_MS + 10), data_version=7)
    recent.keep("b", kept(("v", 1), facts_of(), good_until_ms=NOW_MS + 10))

    assert recent.unchanged("a", data_version=7, now_ms=NOW_MS) is not None
    assert recent.unchanged("a", data_version=8, now_ms=NOW_MS) is None
    assert "a" in recent  # something was written: only the vouch tells whether it was what the answer shows
    assert recent.get("a", version=("v", 1), now_ms=NOW_MS, data_version=8) is not None
    assert recent.unchanged("a", data_version=8, now_ms=NOW_MS) is not None
    assert recent.unchanged("a", data_version=8, now_ms=NOW_MS + 10) is None
    assert recent.unchanged("b", data_version=7, now_ms=NOW_MS) is None  # kept where no version was read
