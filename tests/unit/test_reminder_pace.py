"""The pace of a burst of reminders (Reminders.SPREAD_SECONDS): the rest after each batch."""

from __future__ import annotations

import math
import time

from hypothesis import given
from hypothesis import strategies as st

from petrecords.reminders import Pace, paced_rest


def test_the_time_to_spare_is_shared_between_the_batches_left() -> None:
    # 10,000 left at 0.2 ms each (2 s of work) with 12 s left: 10 s to spare, over 10 batches of 1,000.
    assert math.isclose(
        paced_rest(remaining=10_000, seconds_per_row=0.0002, seconds_left=12.0, batch=1_000, most=5.0), 1.0
    )


def test_a_pass_that_is_late_or_done_does_not_rest() -> None:
    assert paced_rest(remaining=10_000, seconds_per_row=0.0002, seconds_left=1.0, batch=1_000, most=5.0) == 0.0
    assert paced_rest(remaining=10_000, seconds_per_row=0.0002, seconds_left=-3.0, batch=1_000, most=5.0) == 0.0
    assert paced_rest(remaining=0, seconds_per_row=0.0002, seconds_left=30.0, batch=1_000, most=5.0) == 0.0


def test_a_rest_is_at_most_the_most() -> None:
    assert paced_rest(remaining=10, seconds_per_row=0.0002, seconds_left=30.0, batch=1_000, most=2.0) == 2.0


@given(
    remaining=st.integers(min_value=-10, max_value=10**6),
    seconds_per_row=st.floats(min_value=0, max_value=1),
    seconds_left=st.floats(min_value=-100, max_value=100),
    batch=st.integers(min_value=1, max_value=5_000),
)
def test_the_rests_never_make_the_pass_end_later_than_it_means_to(
    remaining: int, seconds_per_row: float, seconds_left: float, batch: int
) -> None:
    rest = paced_rest(
        remaining=remaining, seconds_per_row=seconds_per_row, seconds_left=seconds_left, batch=batch, most=2.0
    )
    assert 0.0 <= rest <= 2.0
    if remaining > 0:
        # Resting this long after each batch left, the work still ends within the time left (or as soon as it can).
        batches = math.ceil(remaining / batch)
        work = remaining * seconds_per_row
        assert rest * batches + work <= max(seconds_left, work) + 1e-6


def test_a_pace_told_what_is_left_rests_for_the_burst_not_for_its_own_share() -> None:
    # Of 10,000 owed, this instance set 1,000 in 0.2 s, and another instance 5,000 meanwhile: 4,000 are left.
    alone, beside_another = (Pace(owed=10_000, ends_by=time.monotonic() + 12.0) for _ in range(2))
    as_if_alone = alone.rest_after(1_000, 0.2, 1_000, most=5.0)
    told = beside_another.rest_after(1_000, 0.2, 1_000, most=5.0, left=4_000)

    assert math.isclose(as_if_alone, (12.0 - 9_000 * 0.0002) / 9, rel_tol=0.01)
    assert math.isclose(told, (12.0 - 4_000 * 0.0002) / 4, rel_tol=0.01)
