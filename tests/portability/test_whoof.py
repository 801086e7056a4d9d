"""`petrecords import-whoof` (contract section 13) from a Whoof database as Whoof's own EF Core migrations create
it (tests/fixtures/whoof/schema.sql), holding Whoof's own seed (tests/fixtures/whoof/seed.sql) and rows that break
this contract's rules in every way the contract names."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from litestar.testing import TestClient

from petrecords.app import create_app
from tests.portability.support import command, lines_after_first, migrated
from tests.support import ADMIN, auth, throwaway_postgres

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent.parent / "fixtures" / "whoof"
FLUFFY = "f47ac10b-58cc-4372-a567-0e02b2c3d479"  # the seed's first pet: a Cat of graduenz@gmail.com
BUDDY = "54a9c7ec-546b-44d7-9616-e392ad1b1bd7"
RABIES_FOR_CATS = "de305d54-75b4-431b-adb2-eb6b9e546014"
# Rows beyond the seed (tests/fixtures/whoof/rules.sql), one for each rule of section 13.
ORPHAN = "00000000-0000-4000-8000-000000000001"
UNTRIMMED = "00000000-0000-4000-8000-000000000002"
EMPTY_NAME = "00000000-0000-4000-8000-000000000003"
MIXED_CASE = "00000000-0000-4000-8000-000000000004"
BLANK_DESCRIPTION = "00000000-0000-4000-8000-000000000005"
FUTURE_SHOT = "00000000-0000-4000-8000-000000000006"
ORPHANS_SHOT = "00000000-0000-4000-8000-000000000007"
DOTNET_DEFAULT = "00000000-0000-4000-8000-000000000008"  # created at 0001-01-01, .NET's default date
MISMATCHED = ("24a56e0b-7d20-4a5d-ba26-0d34403ce46d", "06c5e411-6a6f-4085-aebb-b3d7a201c97c")
"""The seed's two vaccinations of a vaccine for another pet type."""


async def _build_whoof(url: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute((FIXTURES / "schema.sql").read_text())
        await connection.execute((FIXTURES / "seed.sql").read_text())
        await connection.execute((FIXTURES / "rules.sql").read_text())
    finally:
        await connection.close()


@pytest.fixture(scope="module")
def whoof_url() -> Any:
    with throwaway_postgres() as url:
        asyncio.run(_build_whoof(url))
        yield url


def _line_of(output: str, whoof_id: str) -> str:
    found = [line for line in output.splitlines() if whoof_id in line.split(":")[0]]
    assert len(found) == 1, output
    return found[0]


class TestImportWhoof:
    def test_whoofs_seed_and_every_rule(self, tmp_path: Path, whoof_url: str) -> None:
        url = f"sqlite:///{tmp_path / 'moved-in.sqlite3'}"
        done = command(url, tmp_path, "import-whoof", whoof_url)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        output = done.stdout
        # Whoof's seed writes `system` as every audit user: each row is loaded with the system user, and said so.
        assert 'createdBy and modifiedBy: "system" is not an e-mail address' in _line_of(output, FLUFFY)
        assert "whoof-import@example.invalid" in _line_of(output, FLUFFY)
        # The seed's two vaccinations of a vaccine for another pet type are skipped.
        for shot in MISMATCHED:
            assert "(--keep-mismatched loads it) -> skipped" in _line_of(output, shot)
        assert "the pet has no owner" in _line_of(output, ORPHAN)
        assert _line_of(output, ORPHAN).endswith("-> skipped")
        assert _line_of(output, ORPHANS_SHOT).endswith("-> skipped")  # its pet was not loaded
        assert "is not trimmed" in _line_of(output, UNTRIMMED)
        assert "not in lower case" in _line_of(output, UNTRIMMED)
        assert _line_of(output, UNTRIMMED).endswith("-> loaded corrected")
        assert "is empty" in _line_of(output, EMPTY_NAME)
        assert "is blank (loaded as null)" in _line_of(output, BLANK_DESCRIPTION)
        assert "createdBy" in _line_of(output, MIXED_CASE)
        assert "in the future" in _line_of(output, FUTURE_SHOT)
        assert _line_of(output, DOTNET_DEFAULT) == (
            f"Pets {DOTNET_DEFAULT}: createdAt 0001-01-01T00:00:00.000Z is before 1900 (.NET's default for a time "
            "never set) -> loaded as it is"
        )
        assert output.splitlines()[-1] == (
            "loaded 12 pets, 22 vaccines, 4 pet-vaccination records; skipped 6 rows; corrected 37 rows; "
            "kept 1 rows as they are"
        )

        settings = migrated(url, tmp_path)
        with TestClient(app=create_app(settings)) as client:  # type: ignore[arg-type]
            admin = auth(ADMIN, admin=True)
            pet = client.get(f"/v1/pets/{UNTRIMMED}", headers=admin).json()
            assert (pet["name"], pet["petType"], pet["ownerId"], pet["createdBy"]) == (
                "Spot",
                "Capybara",
                "ann@example.com",
                "vet@example.com",
            )
            fluffy = client.get(f"/v1/pets/{FLUFFY}", headers=admin).json()
            assert fluffy["createdBy"] == fluffy["modifiedBy"] == "whoof-import@example.invalid"
            history = client.get(f"/v1/pets/{FLUFFY}/history", headers=admin).json()["items"]
            assert [(item["action"], item["version"]) for item in history] == [("created", 1)]
            assert history[0]["at"] == fluffy["modifiedAt"]
            assert history[0]["by"] == fluffy["modifiedBy"]
            assert history[0]["record"] == fluffy
            methuselah = client.get(f"/v1/pets/{DOTNET_DEFAULT}", headers=admin).json()
            assert methuselah["createdAt"] == "0001-01-01T00:00:00.000Z"
            vaccine = client.get(f"/v1/vaccines/{BLANK_DESCRIPTION}", headers=admin).json()
            assert vaccine["description"] is None
            shots = client.get("/v1/pet-vaccination", params={"petId": FLUFFY}, headers=admin).json()["items"]
            assert {shot["vaccineId"] for shot in shots} == {RABIES_FOR_CATS, "eb591500-d0c3-4a4f-8c6d-539bc733e4e3"}
            assert all(shot["ownerId"] == "graduenz@gmail.com" for shot in shots)
            buddy = client.get(f"/v1/pets/{BUDDY}", headers=auth("paulo.monezi@icloud.com"))
            assert buddy.status_code == 200
            feed = client.get("/v1/changes", params={"limit": 1000}, headers=admin).json()["items"]
            assert len(feed) == 12 + 22 + 4
            assert all(change["action"] == "created" for change in feed)

    def test_orphan_owner_and_system_user_are_given(self, tmp_path: Path, whoof_url: str) -> None:
        url = f"sqlite:///{tmp_path / 'moved-in.sqlite3'}"
        done = command(
            url,
            tmp_path,
            "import-whoof",
            whoof_url,
            "--orphan-owner",
            "Desk@Example.com",
            "--system-user",
            "it@example.com",
        )
        assert done.returncode == 0, done.stderr
        assert _line_of(done.stdout, ORPHAN).endswith("-> loaded corrected")
        assert "desk@example.com" in _line_of(done.stdout, ORPHAN)
        assert "it@example.com" in _line_of(done.stdout, FLUFFY)
        settings = migrated(url, tmp_path)
        with TestClient(app=create_app(settings)) as client:  # type: ignore[arg-type]
            stray = client.get(f"/v1/pets/{ORPHAN}", headers=auth("desk@example.com")).json()
            # Timestamps truncated to the millisecond.
            assert (stray["createdAt"], stray["modifiedAt"]) == ("2024-01-01T10:00:00.123Z", "2024-02-01T10:00:00.987Z")
            assert stray["createdBy"] == "it@example.com"

    def test_a_database_with_records_is_refused_and_left_as_it_was(self, tmp_path: Path, whoof_url: str) -> None:
        url = f"sqlite:///{tmp_path / 'moved-in.sqlite3'}"
        assert command(url, tmp_path, "import-whoof", whoof_url).returncode == 0
        again = command(url, tmp_path, "import-whoof", whoof_url)
        assert again.returncode == 1
        assert again.stderr.count("\n") == 1
        assert "holds records already" in again.stderr

    def test_a_database_that_is_not_whoofs_is_one_line(self, tmp_path: Path) -> None:
        with throwaway_postgres() as other:
            done = command(f"sqlite:///{tmp_path / 'db.sqlite3'}", tmp_path, "import-whoof", other)
        assert done.returncode == 1
        assert (
            done.stderr
            == "petrecords import-whoof: not a Whoof database: it has no table Pets, Vaccines, PetVaccinations\n"
        )

    def test_a_url_that_is_not_postgresqls_is_one_line(self, tmp_path: Path) -> None:
        done = command(f"sqlite:///{tmp_path / 'db.sqlite3'}", tmp_path, "import-whoof", "mysql://whoof@db/whoof")
        assert done.returncode == 1
        assert (
            done.stderr == "petrecords import-whoof: POSTGRESQL_URL must be a postgresql:// URL of the Whoof database\n"
        )

    def test_keep_mismatched_loads_them_with_a_note(self, tmp_path: Path, whoof_url: str) -> None:
        url = f"sqlite:///{tmp_path / 'moved-in.sqlite3'}"
        done = command(url, tmp_path, "import-whoof", whoof_url, "--keep-mismatched")
        assert done.returncode == 0, done.stderr
        for shot in MISMATCHED:
            line = _line_of(done.stdout, shot)
            assert "is for Dog, its pet" in line or "is for Cat, its pet" in line
            assert "(kept by --keep-mismatched, with a note in its notes)" in line
            assert not line.endswith("-> skipped")
        assert done.stdout.splitlines()[-1].startswith("loaded 12 pets, 22 vaccines, 6 pet-vaccination records;")
        settings = migrated(url, tmp_path)
        with TestClient(app=create_app(settings)) as client:  # type: ignore[arg-type]
            for shot in MISMATCHED:
                kept = client.get(f"/v1/pet-vaccination/{shot}", headers=auth(ADMIN, admin=True)).json()
                assert kept["notes"].startswith("Moved in from Whoof as it was recorded there: its vaccine, ")
                assert f"and this pet is a {'Cat' if kept['vaccine']['petType'] == 'Dog' else 'Dog'}." in kept["notes"]

    def test_what_was_moved_in_exports_and_imports_again(self, tmp_path: Path, whoof_url: str) -> None:
        """Years before 1000 in four digits, and vaccinations kept though their vaccine is for another pet type:
        the export imports again, and exports the same lines."""
        first = f"sqlite:///{tmp_path / 'moved-in.sqlite3'}"
        assert command(first, tmp_path, "import-whoof", whoof_url, "--keep-mismatched").returncode == 0
        exported = tmp_path / "moved-in.jsonl"
        assert command(first, tmp_path, "export", "--output", str(exported)).returncode == 0
        assert b'"createdAt":"0001-01-01T00:00:00.000Z"' in exported.read_bytes()
        again = f"sqlite:///{tmp_path / 'again.sqlite3'}"
        imported = command(again, tmp_path, "import", str(exported))
        assert imported.returncode == 0, imported.stderr
        second = tmp_path / "again.jsonl"
        assert command(again, tmp_path, "export", "--output", str(second)).returncode == 0
        assert lines_after_first(second) == lines_after_first(exported)
