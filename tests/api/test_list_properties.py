"""GET /v1/pets under arbitrary input: never a 500, and what comes back is what the contract promises."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from litestar.testing import TestClient

from tests.support import auth, parts_of_names_from, pet_body

SyncClient = TestClient[Any]

SEEDED = 7
MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 100
# Names with wildcard characters, backslashes, mixed case and non-ASCII letters. Two non-ASCII cases the
# service is known to get wrong (a final capital sigma, the dotted capital I) have their own tests in
# test_list.py, so that this property keeps looking for new problems.
NAMES = (
    "Rex",
    "rex",
    "T-Rex",
    "100% Dog",
    "snake_case",
    "snake9case",
    "back\\slash",
    "Émile",
    "émile",
    "Ωmega",
    "Straße",
    "ab",
)
FOLDS: tuple[Callable[[str], str], ...] = (lambda text: text, str.lower, str.casefold)


def seed(client: SyncClient, names: tuple[str, ...]) -> None:
    for name in names:
        response = client.post("/v1/pets", json=pet_body(name), headers=auth())
        assert response.status_code == 201, response.text


# --- paging ----------------------------------------------------------------------------------------

CANONICAL_INT = re.compile(r"[1-9][0-9]*")
INTEGER_LIKE = re.compile(r" *\+?([0-9]+) *")
# Huge but valid numbers have their own tests in test_list.py; here "ordinary" means up to this.
ORDINARY_LIMIT = 10**9

paging_values = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**25).map(str),
    st.integers(min_value=1, max_value=40).map(str),
    st.text(max_size=12),
    st.text(alphabet="0123456789+-.eE x", max_size=8),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
)


def clearly_valid(value: str) -> bool:
    return CANONICAL_INT.fullmatch(value) is not None and int(value) <= ORDINARY_LIMIT


def clearly_invalid(value: str) -> bool:
    """Not an integer in any spelling, or below 1."""
    match = INTEGER_LIKE.fullmatch(value)
    return match is None or int(match.group(1)) < 1


def test_any_paging_values_are_a_consistent_page_or_400(sync_client: SyncClient) -> None:
    seed(sync_client, tuple(f"Pet {number}" for number in range(SEEDED)))

    @given(page_index=st.none() | paging_values, page_size=st.none() | paging_values)
    def check(page_index: str | None, page_size: str | None) -> None:
        given_values = (("pageIndex", page_index), ("pageSize", page_size))
        params = {name: value for name, value in given_values if value is not None}

        response = sync_client.get("/v1/pets", params=params, headers=auth())

        assert response.status_code in (200, 400), response.text
        body = response.json()
        if response.status_code == 400:
            assert body["code"] == 994
            assert body["errors"]
            assert set(body["errors"]) <= set(params)
            for name, value in params.items():
                if clearly_invalid(value):
                    assert name in body["errors"], (name, value)
                    assert name in body["message"], (name, value)
                if clearly_valid(value):
                    assert name not in body["errors"], (name, value)
            return
        assert not any(clearly_invalid(value) for value in params.values()), params
        index, size = body["pageIndex"], body["pageSize"]
        assert index == (1 if page_index is None else int(page_index.strip(" ")))
        assert size == (DEFAULT_PAGE_SIZE if page_size is None else min(int(page_size.strip(" ")), MAX_PAGE_SIZE))
        assert body["totalCount"] == SEEDED
        assert body["totalPages"] == math.ceil(SEEDED / size)
        assert body["hasPreviousPage"] == (index > 1)
        assert body["hasNextPage"] == (index < body["totalPages"])
        assert len(body["items"]) == max(0, min(size, SEEDED - (index - 1) * size))

    check()


# --- name and search patterns ------------------------------------------------------------------------

ANY, ONE = 0, 1
Token = int | str


def like_tokens(pattern: str, *, fold: Callable[[str], str], other_backslash_escapes: bool) -> list[Token]:
    """The contract's pattern syntax: `%` any run of characters, `_` exactly one, `\\%`, `\\_` and `\\\\`
    themselves. The contract does not say what another backslash means: itself, or an escape of the next
    character (`other_backslash_escapes`). Literal characters are folded (which may lengthen them)."""
    tokens: list[Token] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        following = pattern[index + 1] if index + 1 < len(pattern) else None
        if char == "\\" and following is not None and (following in "%_\\" or other_backslash_escapes):
            tokens.extend(fold(following))
            index += 2
            continue
        if char in "%_":
            tokens.append(ANY if char == "%" else ONE)
        else:
            tokens.extend(fold(char))
        index += 1
    return tokens


def like_match(tokens: list[Token], text: str) -> bool:
    """Whether the tokens match the whole text; the positions reachable after each token (no backtracking)."""
    reachable = {0}
    for token in tokens:
        if token == ANY:
            reachable = set(range(min(reachable), len(text) + 1)) if reachable else set()
        elif token == ONE:
            reachable = {position + 1 for position in reachable if position < len(text)}
        else:
            reachable = {position + 1 for position in reachable if position < len(text) and text[position] == token}
    return len(text) in reachable


def matches(pattern: str, name: str, *, substring: bool, fold: Callable[[str], str], other: bool) -> bool:
    tokens = like_tokens(pattern, fold=fold, other_backslash_escapes=other)
    return like_match([ANY, *tokens, ANY] if substring else tokens, fold(name))


def has_other_backslash(pattern: str) -> bool:
    index = 0
    while index < len(pattern):
        if pattern[index] == "\\":
            if index + 1 < len(pattern) and pattern[index + 1] in "%_\\":
                index += 2
                continue
            return True
        index += 1
    return False


def may_match(pattern: str, name: str, *, substring: bool) -> bool:
    """True under any reasonable reading of "case-insensitive" and of a stray backslash."""
    return any(
        matches(pattern, name, substring=substring, fold=fold, other=other) for fold in FOLDS for other in (False, True)
    )


def must_match(pattern: str, name: str, *, substring: bool) -> bool:
    """True under every reading: the name matches as it is, or both are ASCII and match once lower-cased."""
    if has_other_backslash(pattern):
        return False
    if matches(pattern, name, substring=substring, fold=FOLDS[0], other=False):
        return True
    both_ascii = pattern.isascii() and name.isascii()
    return both_ascii and matches(pattern, name, substring=substring, fold=str.lower, other=False)


patterns = st.one_of(
    parts_of_names_from(NAMES, kept=2),
    st.text(alphabet=st.sampled_from(list("%_\\rRexX -9ÉéωΩß")), max_size=12),
    st.text(max_size=20),
    st.text(alphabet="%_a", min_size=195, max_size=210),
)


def test_any_name_or_search_pattern_is_200_with_matches_or_400(sync_client: SyncClient) -> None:
    seed(sync_client, NAMES)

    @given(parameter=st.sampled_from(["name", "search"]), pattern=patterns)
    def check(parameter: str, pattern: str) -> None:
        response = sync_client.get("/v1/pets", params={parameter: pattern, "pageSize": "100"}, headers=auth())

        assert response.status_code in (200, 400), response.text
        body = response.json()
        if response.status_code == 400:
            assert body["code"] == 994
            assert parameter in body["errors"]
            assert parameter in body["message"]
            return
        substring = parameter == "search"
        found = [item["name"] for item in body["items"]]
        assert body["totalCount"] == len(found)
        for name in found:
            assert may_match(pattern, name, substring=substring), (pattern, name)
        for name in NAMES:
            if must_match(pattern, name, substring=substring):
                assert name in found, (pattern, name)

    check()
