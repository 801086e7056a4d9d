"""`search` through the trigram indexes answers exactly what matching every record would, and the SQLite
index never drifts from the records it indexes, whatever is written.

The expected answers are computed here by brute force: each stored name folded as the service folds it
(petrecords.text.match_key), matched against the contract's pattern syntax.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import pysqlite3.dbapi2 as sqlite3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from litestar.testing import AsyncTestClient, TestClient

from petrecords.text import match_key
from tests.api.test_list_properties import ANY, like_match, like_tokens
from tests.support import ADMIN, ALICE, BOB, auth, create, parts_of_names_from, pet_body

SyncClient = TestClient[Any]
Client = AsyncTestClient[Any]

# Runs of three and more characters that hold wildcards, backslashes, and letters whose folding is not ASCII's:
# a capital sharp s, final and capital sigma, a dotted capital I (whose lower case is two characters, kept as
# it is), a decomposed accent, CJK and an emoji (four bytes in UTF-8).
NAMES = (
    "Rex the Dog",
    "T-REX 2000",
    "100% Dog",
    "50%_off",
    "snake_case_name",
    "back\\slash\\name",
    "Émile Zola",
    "Cafe\u0301 Noir",
    "ΟΔΥΣΣΕΥΣ",
    "Straße 9",
    "STRAẞE 9",
    "İstanbul cat",
    "柴犬 Shiba",
    "Rocket 🚀🚀 Dog",
    "abc",
    "ab",
)


def expected_matches(pattern: str, names: tuple[str, ...]) -> set[str]:
    """The names a `search` pattern matches: a substring of the folded name, the pattern's literal characters
    folded alike, in composed form as a client may send either."""
    tokens = like_tokens(unicodedata.normalize("NFC", pattern), fold=match_key, other_backslash_escapes=False)
    return {name for name in names if like_match([ANY, *tokens, ANY], match_key(name))}


search_patterns = st.one_of(
    parts_of_names_from(NAMES, kept=3),
    st.text(alphabet=st.sampled_from(list("%_\\rRexX -09ÉéΣσςßẞİi\u0301🚀柴\"'*")), min_size=3, max_size=12),
)


def test_search_answers_exactly_the_brute_force_matches(sync_client: SyncClient) -> None:
    for name in NAMES:
        assert sync_client.post("/v1/pets", json=pet_body(name), headers=auth()).status_code == 201

    @given(pattern=search_patterns)
    def check(pattern: str) -> None:
        response = sync_client.get("/v1/pets", params={"search": pattern, "pageSize": "100"}, headers=auth())
        assert response.status_code == 200, response.text
        body = response.json()
        expected = expected_matches(pattern, NAMES)
        assert body["totalCount"] == len(expected), (pattern, expected)
        assert {item["name"] for item in body["items"]} == expected, pattern

    check()


def test_the_brute_force_reads_patterns_as_the_contract_does() -> None:
    """The reference itself, on cases worked out by hand."""
    assert expected_matches("rex", NAMES) == {"Rex the Dog", "T-REX 2000"}
    assert expected_matches("0\\%", NAMES) == {"100% Dog", "50%_off"}
    assert expected_matches("0%_o", NAMES) == {"50%_off", "100% Dog"}
    assert expected_matches("%\\_o", NAMES) == {"50%_off"}
    assert expected_matches("h\\\\n", NAMES) == {"back\\slash\\name"}
    assert expected_matches("h\\n", NAMES) == {"back\\slash\\name"}
    assert expected_matches("straße", NAMES) == {"Straße 9", "STRAẞE 9"}
    assert expected_matches("İst", NAMES) == {"İstanbul cat"}
    assert expected_matches("ist", NAMES) == set()
    assert expected_matches("café", NAMES) == {"Cafe\u0301 Noir"}
    assert expected_matches("οδυσσευσ", NAMES) == {"ΟΔΥΣΣΕΥΣ"}
    assert expected_matches("🚀🚀", NAMES) == {"Rocket 🚀🚀 Dog"}


# --- the index follows every write ------------------------------------------------------------------


def _sqlite_index_in_step(database_url: str) -> None:
    """SQLite's own check of each FTS5 table against the rows it indexes (rank 1: the external content too)."""
    if not database_url.startswith("sqlite"):
        return  # PostgreSQL's GIN indexes are the server's own, updated with each row
    connection = sqlite3.connect(database_url.removeprefix("sqlite:///"))
    try:
        for table in ("pets", "vaccines"):
            check = f"INSERT INTO {table}_search({table}_search, rank) VALUES ('integrity-check', 1)"  # noqa: S608
            connection.execute(check)
    finally:
        connection.close()


async def _found(client: Client, search: str, user: str = ALICE, *, admin: bool = False) -> list[str]:
    response = await client.get("/v1/pets", params={"search": search}, headers=auth(user, admin=admin))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["totalCount"] == len(body["items"])
    return sorted(item["name"] for item in body["items"])


async def test_a_created_pet_is_found_at_once(client: Client, database_url: str) -> None:
    await create(client, name="Bartholomew")
    await create(client, name="Bart")

    assert await _found(client, "thol") == ["Bartholomew"]
    assert await _found(client, "bart") == ["Bart", "Bartholomew"]
    _sqlite_index_in_step(database_url)


async def test_a_renamed_pet_is_found_by_its_new_name_only(client: Client, database_url: str) -> None:
    created = await create(client, name="Bartholomew")
    await create(client, name="Kept Barnaby")

    renamed = await client.put(created.headers["location"], json=pet_body("Maximilian"), headers=auth())
    assert renamed.status_code == 200, renamed.text

    assert await _found(client, "thol") == []
    assert await _found(client, "milia") == ["Maximilian"]
    assert await _found(client, "barnaby") == ["Kept Barnaby"]
    _sqlite_index_in_step(database_url)


async def test_a_replace_that_keeps_the_name_keeps_it_findable(client: Client, database_url: str) -> None:
    created = await create(client, name="Bartholomew")

    replaced = await client.put(created.headers["location"], json=pet_body("Bartholomew", "Cat"), headers=auth())
    assert replaced.status_code == 200, replaced.text

    assert await _found(client, "thol") == ["Bartholomew"]
    _sqlite_index_in_step(database_url)


async def test_a_deleted_pet_is_found_no_more(client: Client, database_url: str) -> None:
    doomed = await create(client, name="Bartholomew")
    await create(client, name="Bartholomew the Second")

    assert (await client.delete(doomed.headers["location"], headers=auth())).status_code == 200

    assert await _found(client, "thol") == ["Bartholomew the Second"]
    _sqlite_index_in_step(database_url)


async def test_a_pet_given_to_another_owner_is_found_by_them_only(client: Client, database_url: str) -> None:
    created = await create(client, name="Bartholomew")
    admin = auth(ADMIN, admin=True)

    moved = await client.put(created.headers["location"], json=pet_body("Bartholomew", ownerId=BOB), headers=admin)
    assert moved.status_code == 200, moved.text

    assert await _found(client, "thol", ALICE) == []
    assert await _found(client, "thol", BOB) == ["Bartholomew"]
    assert await _found(client, "thol", ADMIN, admin=True) == ["Bartholomew"]
    _sqlite_index_in_step(database_url)


async def test_a_vaccine_is_found_by_its_name_or_description_after_every_write(
    client: Client, database_url: str
) -> None:
    admin = auth(ADMIN, admin=True)
    body = {"name": "Rabies", "description": "Core vaccine, yearly.", "petType": "Dog", "duration": 365}
    created = await client.post("/v1/vaccines", json=body, headers=admin)
    assert created.status_code == 201, created.text

    async def found(search: str) -> list[str]:
        response = await client.get("/v1/vaccines", params={"search": search}, headers=admin)
        assert response.status_code == 200, response.text
        return [item["name"] for item in response.json()["items"]]

    assert await found("abie") == ["Rabies"]
    assert await found("yearly") == ["Rabies"]
    changed = {**body, "name": "Leptospirosis", "description": "Every other year."}
    assert (await client.put(created.headers["location"], json=changed, headers=admin)).status_code == 200
    assert await found("abie") == []
    assert await found("yearly") == []
    assert await found("other yea") == ["Leptospirosis"]
    _sqlite_index_in_step(database_url)
    assert (await client.delete(created.headers["location"], headers=admin)).status_code == 200
    assert await found("lepto") == []
    _sqlite_index_in_step(database_url)


@pytest.mark.only_on("sqlite")
@pytest.mark.parametrize("vacuum", ["VACUUM"])
async def test_vacuum_keeps_the_sqlite_index_in_step(client: Client, database_url: str, vacuum: str) -> None:
    """The SQLite index refers to records by rowid: VACUUM (after deletes left gaps) must keep the rowids."""
    created = [await create(client, name=f"Bartholomew {number}") for number in range(6)]
    for response in created[::2]:
        assert (await client.delete(response.headers["location"], headers=auth())).status_code == 200
    connection = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        connection.execute(vacuum)
    finally:
        connection.close()

    assert await _found(client, "tholomew") == ["Bartholomew 1", "Bartholomew 3", "Bartholomew 5"]
    _sqlite_index_in_step(database_url)
