"""A certificate's link keeps working after `petrecords export` and `petrecords import` (contract sections 13 and
16): the digest of its token travels with the record, and its changes stay in its issuer's feed. SQLite to
PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar.testing import TestClient

from petrecords.app import create_app
from petrecords.portability import commands
from tests.portability.support import migrated
from tests.support import ALICE, BOB, auth, pet_body, throwaway_postgres


def _client(settings: Any) -> TestClient[Any]:
    return TestClient(app=create_app(settings))  # type: ignore[arg-type]


def test_an_imported_certificate_keeps_its_link_and_its_issuers_feed(tmp_path: Path) -> None:
    source = migrated(f"sqlite:///{tmp_path / 'source.sqlite3'}", tmp_path)
    with _client(source) as client:
        pet = client.post("/v1/pets", json=pet_body(), headers=auth(ALICE)).json()
        share = {"petId": pet["id"], "grantee": BOB, "access": "read"}
        assert client.post("/v1/pet-shares", json=share, headers=auth(ALICE)).status_code == 201
        certificate = client.post("/v1/pet-certificates", json={"petId": pet["id"]}, headers=auth(BOB)).json()
        before = client.get(certificate["link"]).json()
    exported = tmp_path / "export.jsonl"
    commands.export(source, output=exported)
    assert certificate["link"].rsplit("/", 1)[1] not in exported.read_text()
    with throwaway_postgres() as url:
        target = migrated(url, tmp_path)
        commands.import_file(target, exported)
        with _client(target) as client:
            after = client.get(certificate["link"])
            assert after.status_code == 200, after.text
            assert after.json()["certificateId"] == before["certificateId"]
            assert after.json()["pet"] == before["pet"]
            feed = client.get("/v1/changes?resource=pet-certificates", headers=auth(BOB)).json()
            assert [change["id"] for change in feed["items"]] == [certificate["id"]]
            assert client.delete(f"/v1/pet-certificates/{certificate['id']}", headers=auth(BOB)).status_code == 200
            assert client.get(certificate["link"]).status_code == 410
