"""Deep pages without walking every skipped row each time.

`OFFSET n` makes the database step over n rows: the middle page of a million pets costs tens of
milliseconds, so deep pages would be a cheap way to tie up the server. For a query whose sort
fields all run the same way, the sort key of the last row before every BLOCK-th position is kept
as an anchor: a deep page seeks past the nearest anchor with a row-value comparison, which an
index serves, and steps over fewer than BLOCK rows. The first request to reach a block walks to it
once, from the nearest anchor below.

Anchors describe one state of the data. They are kept with the store's data version and all
forgotten when it changes, so a page is always what OFFSET would have returned.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Any

BLOCK = 4096
MAX_QUERIES = 256
"""Queries whose anchors are kept; the oldest go first."""

SortKeyValues = tuple[Any, ...]


class PageAnchors:
    """The anchors of each query, for one data version of one store."""

    def __init__(self) -> None:
        self._version: Hashable | None = None
        self._by_query: dict[Hashable, dict[int, SortKeyValues]] = {}

    def of(self, version: Hashable, query: Hashable) -> dict[int, SortKeyValues]:
        """The anchors known for `query` (position -> sort key), to read and add to."""
        if version != self._version:
            self._version = version
            self._by_query = {}
        anchors = self._by_query.get(query)
        if anchors is None:
            if len(self._by_query) >= MAX_QUERIES:
                del self._by_query[next(iter(self._by_query))]
            anchors = self._by_query[query] = {}
        return anchors


def uniform_direction(directions: list[bool]) -> bool:
    """Whether every sort field runs the same way: only then is the order a row-value comparison."""
    return len(set(directions)) == 1


async def seek_position(
    anchors: dict[int, SortKeyValues],
    offset: int,
    key_at: Callable[[SortKeyValues | None, int], Awaitable[SortKeyValues | None]],
) -> tuple[SortKeyValues | None, int]:
    """(the anchor to seek past, the rows still to skip after it) for `offset`.

    `key_at(anchor, skip)` returns the sort key of the row `skip` rows after `anchor` (after the start
    when None), or None past the end; new anchors found that way are added to `anchors`.
    """
    block_start = offset // BLOCK * BLOCK
    if block_start == 0:
        return None, offset
    if block_start not in anchors:
        lower = max((position for position in anchors if position < block_start), default=0)
        start_key = anchors.get(lower)
        found = await key_at(start_key, block_start - lower - 1)
        if found is None:
            return start_key, offset - lower
        anchors[block_start] = found
    return anchors[block_start], offset - block_start
