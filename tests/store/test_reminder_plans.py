"""Reminders find their doses through an index (contract section 15, issue 54: with 1,000,000 doses a pass reads only
those whose moment has come): each of a pass's two ranges is a range of the index (reminded, due_at, id), read in
its order (or from its end, where another instance writes from its beginning), so that the rows that wait and those
already reminded are never read. The duty's next moment is the first row of each range, read the same way, and what
a burst owes (the size of its process's and its pace's decisions) a count of each range."""

from __future__ import annotations

import re

import pytest

from petrecords.reminders import DUE_SOON, NOT_YET, owed_count, reminder_range
from tests.store.test_query_plans import NOW, _plan


@pytest.mark.parametrize("limit", [1, 100])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("reminded", [NOT_YET, DUE_SOON])
async def test_a_pass_reads_a_range_of_the_reminded_index(
    database_url: str, reminded: str, backward: bool, limit: int
) -> None:
    plan = await _plan(
        database_url,
        *reminder_range(reminded, NOW, limit, backward=backward),
        forbid=("enable_seqscan", "enable_bitmapscan", "enable_sort"),
    )
    if database_url.startswith("sqlite"):
        assert re.search(
            r"SEARCH due_doses USING (COVERING )?INDEX ix_due_doses_reminded_due_at_id \(reminded=\? AND due_at<\?\)",
            plan,
        ), plan
        assert "TEMP B-TREE" not in plan, plan
        return
    assert re.search(r"Index Scan (Backward )?using ix_due_doses_reminded_due_at_id on due_doses", plan), plan
    assert "Seq Scan" not in plan, plan
    assert not re.search(r"(^|->)\s*Sort\s+\(", plan), plan


@pytest.mark.parametrize("reminded", [NOT_YET, DUE_SOON])
async def test_what_a_burst_owes_is_counted_over_a_range_of_the_reminded_index(
    database_url: str, reminded: str
) -> None:
    plan = await _plan(database_url, *owed_count(reminded, NOW), forbid=("enable_seqscan", "enable_bitmapscan"))
    if database_url.startswith("sqlite"):
        assert re.search(
            r"SEARCH due_doses USING COVERING INDEX ix_due_doses_reminded_due_at_id \(reminded=\? AND due_at<\?\)",
            plan,
        ), plan
        return
    assert re.search(r"Index (Only )?Scan using ix_due_doses_reminded_due_at_id on due_doses", plan), plan
    assert "Seq Scan" not in plan, plan
