"""`petrecords export` and `petrecords import` (contract section 13): an exact copy from one database to the
other and back, refusals that write nothing, and a snapshot taken while the service writes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pysqlite3.dbapi2 as sqlite3
import pytest

from petrecords.portability import commands
from petrecords.portability.errors import CommandFailed
from tests.e2e.servers import running_server
from tests.portability.support import PETRECORDS, command, lines_after_first, migrated, seed, synthetic_export, view
from tests.support import ALICE, fetch_sql, throwaway_postgres

pytestmark = pytest.mark.slow


def _sqlite(directory: Path, name: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / name}"


class TestRoundTrip:
    def test_sqlite_to_postgresql_to_sqlite_keeps_every_record_etag_history_and_the_feeds_order(
        self, tmp_path: Path
    ) -> None:
        first = migrated(_sqlite(tmp_path, "first.sqlite3"), tmp_path)
        seed(first)
        before = view(first)
        exported = tmp_path / "first.jsonl"
        commands.export(first, output=exported)
        with throwaway_postgres(migrated=True) as url:
            moved = migrated(url, tmp_path)
            commands.import_file(moved, exported)
            assert view(moved) == before
            assert kept_counts(url) == kept_counts(first.resolved_database_url)
            # Vacuumed and analyzed by the import itself (autovacuum's own rounds leave these two unset).
            untouched = "SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NULL OR last_vacuum IS NULL"
            assert asyncio.run(fetch_sql(url, untouched)) == []
            again = tmp_path / "postgresql.jsonl"
            # Through the command line, as an operator runs it: the same lines after the first.
            done = command(url, tmp_path, "export", "--output", str(again))
            assert done.returncode == 0, done.stderr
            assert done.stderr == ""  # not a terminal: no progress
            assert lines_after_first(again) == lines_after_first(exported)
        back = migrated(_sqlite(tmp_path / "back", "back.sqlite3"), tmp_path)
        commands.import_file(back, again)
        assert view(back) == before
        last = tmp_path / "back.jsonl"
        commands.export(back, output=last)
        assert lines_after_first(last) == lines_after_first(exported)

    def test_the_file_is_json_lines_as_the_contract_says(self, tmp_path: Path) -> None:
        settings = migrated(_sqlite(tmp_path, "db.sqlite3"), tmp_path)
        seed(settings)
        exported = tmp_path / "out.jsonl"
        commands.export(settings, output=exported)
        header, *lines = [msgspec.json.decode(line) for line in exported.read_bytes().splitlines()]
        assert set(header) == {"format", "version", "exportedAt"}
        assert header["format"] == "petrecords-export"
        assert header["version"] == 1
        kinds = [next(iter(line)) if len(line) == 1 else "record" for line in lines]
        assert kinds == sorted(kinds, key=lambda kind: kind == "change")  # records, then changes
        records = [line for line in lines if "record" in line]
        assert all(set(line) == {"resource", "record"} for line in records)
        assert all(line["record"]["version"] >= 1 for line in records)
        changes = [line["change"] for line in lines if "change" in line]
        assert all(set(change) == {"resource", "id", "action", "version", "at", "by", "record"} for change in changes)


def kept_counts(url: str) -> dict[tuple[str, str, str], int]:
    """The kept counts of each resource, owner and partition (summed over their slots), but those at zero."""
    query = (
        "SELECT resource, scope, partition, sum(count) FROM record_counts GROUP BY resource, scope, partition "
        "HAVING sum(count) <> 0"
    )
    if url.startswith("sqlite"):
        connection = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            rows = connection.execute(query).fetchall()
        finally:
            connection.close()
    else:
        rows = asyncio.run(fetch_sql(url, query))
    return {(row[0], row[1], row[2]): int(row[3]) for row in rows}


def _records_and_changes(url: str) -> tuple[int, ...]:
    tables = ("pets", "vaccines", "pet_vaccinations", "changes", "record_counts")
    if url.startswith("sqlite"):
        connection = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            counts = [connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in tables]  # noqa: S608
            assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            connection.close()
        return tuple(counts)
    return tuple(
        asyncio.run(fetch_sql(url, f"SELECT count(*) FROM {table}"))[0][0]  # noqa: S608
        for table in tables
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def target_url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        yield _sqlite(tmp_path / "target", "target.sqlite3")
        return
    with throwaway_postgres(migrated=True) as url:
        yield url


def _last_pet(lines: list[bytes]) -> bytes:
    """The file's last line of a pet (the last lines are those of whatever was written last: a share, say)."""
    return next(line for line in reversed(lines) if b'"resource":"pets"' in line)


class TestRefusals:
    @pytest.fixture(scope="class")
    @classmethod
    def exported(cls, tmp_path_factory: pytest.TempPathFactory) -> Path:
        """One export for the class's tests, which only read it."""
        directory = tmp_path_factory.mktemp("exported")
        source = migrated(_sqlite(directory / "source", "source.sqlite3"), directory)
        seed(source)
        path = directory / "source.jsonl"
        commands.export(source, output=path)
        return path

    def test_a_database_that_holds_a_record_of_the_file_is_named_and_nothing_is_written(
        self, tmp_path: Path, exported: Path, target_url: str
    ) -> None:
        lines = exported.read_bytes().splitlines(keepends=True)
        clash = next(number for number, line in enumerate(lines, start=1) if b'"resource":"vaccines"' in line)
        one = tmp_path / "one.jsonl"
        one.write_bytes(lines[0] + lines[clash - 1])
        target = migrated(target_url, tmp_path)
        commands.import_file(target, one)
        before = _records_and_changes(target_url)

        with pytest.raises(CommandFailed) as refused:
            commands.import_file(target, exported)

        record_id = msgspec.json.decode(lines[clash - 1])["record"]["id"]
        assert f"line {clash}: vaccines {record_id} is in the database already" in str(refused.value)
        assert _records_and_changes(target_url) == before

    def test_a_database_with_other_records_is_refused(self, tmp_path: Path, exported: Path, target_url: str) -> None:
        target = migrated(target_url, tmp_path)
        seed(target)
        before = _records_and_changes(target_url)
        done = command(target_url, tmp_path, "import", str(exported))
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1
        assert "the database holds records already" in done.stderr
        assert _records_and_changes(target_url) == before

    @pytest.mark.parametrize(
        ("damage", "said"),
        [
            (lambda lines: [*lines[:-1], lines[-1][:40]], "is cut off"),
            (lambda lines: [*lines[:3], b'{"resource": "pets", "record": {"id": "x"}}\n', *lines[3:]], "line 4: "),
            (lambda lines: [*lines[:2], b"not json\n", *lines[2:]], "line 3: "),
            (lambda lines: [lines[0], lines[1].replace(b'"name":', b'"nom":'), *lines[2:]], "line 2: "),
            (lambda lines: [lines[0], lines[1].replace(b'"ownerId":"', b'"ownerId":"NOT'), *lines[2:]], "line 2: "),
            (lambda lines: [lines[0], lines[1].replace(b'"version":', b'"version":-'), *lines[2:]], "line 2: "),
            (lambda lines: [lines[0], lines[1].replace(b'"name":"', b'"name":" '), *lines[2:]], "line 2: name"),
            (lambda lines: [*lines, lines[1]], "the database refused the record"),
            (
                lambda lines: [*lines, _last_pet(lines).replace(b'"ownerId"', b'"owner"')],
                "record: a pet record has no member owner",
            ),
            (
                lambda _: [b'{"format": "other", "version": 1, "exportedAt": "2026-01-01T00:00:00.000Z"}\n'],
                "line 1",
            ),
        ],
    )
    def test_a_cut_off_or_malformed_file_names_the_line_and_nothing_is_written(
        self, tmp_path: Path, exported: Path, target_url: str, damage: Any, said: str
    ) -> None:
        damaged = tmp_path / "damaged.jsonl"
        damaged.write_bytes(b"".join(damage(exported.read_bytes().splitlines(keepends=True))))
        target = migrated(target_url, tmp_path)
        with pytest.raises(CommandFailed) as refused:
            commands.import_file(target, damaged)
        assert said in str(refused.value)
        assert _records_and_changes(target_url) == (0, 0, 0, 0, 0)


class TestKilledMidway:
    # Long: the file must be big enough (60,000 pets) that the import is still loading when it is killed.
    @pytest.mark.long
    def test_an_import_killed_midway_leaves_the_target_as_it_was(self, tmp_path: Path, target_url: str) -> None:
        big = tmp_path / "big.jsonl"
        synthetic_export(big, 60_000)
        migrated(target_url, tmp_path)
        log = tmp_path / "import.log"
        with log.open("wb") as sink:  # the child has its own copy
            process = subprocess.Popen(
                [str(PETRECORDS), "import", str(big)],
                env={
                    "PETRECORDS_DATABASE_URL": target_url,
                    "PETRECORDS_DATA_DIR": str(tmp_path),
                    "PATH": "/usr/bin:/bin",
                },
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
        try:
            deadline = time.monotonic() + 120
            while not _loading(target_url):
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the import did not start loading"
                time.sleep(0.05)
            time.sleep(0.5)
            assert process.poll() is None, "the import ended before it could be killed"
            process.send_signal(signal.SIGKILL)
        finally:
            process.kill()
            process.wait()
        assert _records_and_changes(target_url) == (0, 0, 0, 0, 0)


def _loading(url: str) -> bool:
    """Whether an import is writing to the database now."""
    if url.startswith("sqlite"):
        wal = Path(url.removeprefix("sqlite:///") + "-wal")
        return wal.exists() and wal.stat().st_size > 1_000_000
    rows = asyncio.run(
        fetch_sql(
            url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'COPY%'"
        )
    )
    return bool(rows[0][0])


class TestSnapshot:
    def test_every_write_acknowledged_before_the_export_began_is_in_it_and_the_rest_agrees(
        self, tmp_path: Path, target_url: str
    ) -> None:
        """Writers create, rename and delete pets through a running server during the whole export."""
        with running_server(tmp_path / "data", database_url=target_url, users=[ALICE]) as server:
            headers = {"Authorization": f"Bearer {server.tokens[ALICE]}"}
            acknowledged: list[str] = []
            stop = threading.Event()

            def write() -> None:
                with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
                    number = 0
                    while not stop.is_set():
                        number += 1
                        created = client.post("/v1/pets", json={"name": f"Pet {number}", "petType": "Dog"})
                        assert created.status_code == 201
                        pet = created.json()
                        acknowledged.append(pet["id"])
                        if number % 3 == 0:
                            client.put(f"/v1/pets/{pet['id']}", json={"name": "Renamed", "petType": "Cat"})
                        if number % 5 == 0:
                            client.delete(f"/v1/pets/{acknowledged[-2]}")
                            acknowledged.pop(-2)

            writer = threading.Thread(target=write)
            writer.start()
            try:
                while len(acknowledged) < 50:
                    time.sleep(0.05)
                before = list(acknowledged)
                out = tmp_path / "during.jsonl"
                done = command(target_url, tmp_path / "data", "export", "--output", str(out))
                assert done.returncode == 0, done.stderr
                assert len(acknowledged) > len(before)  # it wrote on during the export
            finally:
                stop.set()
                writer.join()
        lines = [msgspec.json.decode(line) for line in out.read_bytes().splitlines()[1:]]
        records = {line["record"]["id"]: line["record"] for line in lines if "record" in line}
        assert set(before) - {pet for pet in before if pet not in acknowledged} <= set(records)
        # One state: the records are exactly those that the changes leave, at the versions they leave.
        alive: dict[str, int] = {}
        for change in (line["change"] for line in lines if "change" in line):
            if change["action"] == "deleted":
                alive.pop(change["id"])
            else:
                alive[change["id"]] = change["version"]
        assert {record_id: record["version"] for record_id, record in records.items()} == alive


class TestProgress:
    def test_shown_on_a_terminal(self, tmp_path: Path) -> None:
        url = _sqlite(tmp_path, "db.sqlite3")
        seed(migrated(url, tmp_path))
        controller, terminal = os.openpty()
        try:
            env = {name: value for name, value in os.environ.items() if not name.startswith("PETRECORDS_")}
            env.update(PETRECORDS_DATABASE_URL=url, PETRECORDS_DATA_DIR=str(tmp_path), COLUMNS="120")
            done = subprocess.run(
                [str(PETRECORDS), "export", "--output", str(tmp_path / "out.jsonl")],
                env=env,
                stderr=terminal,
                timeout=120,
                check=False,
            )
            os.close(terminal)
            shown = b""
            with contextlib.suppress(OSError):  # the terminal's other end is closed once all is read
                while chunk := os.read(controller, 65536):
                    shown += chunk
        finally:
            os.close(controller)
        assert done.returncode == 0
        assert b"export" in shown
        assert b"records" in shown


@pytest.fixture(scope="module")
def seeded_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The export of the seed (every resource, shares and history), made once for the module."""
    directory = tmp_path_factory.mktemp("seeded")
    source = migrated(_sqlite(directory, "source.sqlite3"), directory)
    seed(source)
    path = directory / "source.jsonl"
    commands.export(source, output=path)
    return path


def _edited(exported: Path, out: Path, where: Any, edit: Any) -> int:
    """A copy of the export at `out` with the first line that `where` picks (given the line's JSON) changed by `edit`
    (in place); that line's number."""
    lines = exported.read_bytes().splitlines(keepends=True)
    for number, line in enumerate(lines[1:], start=2):
        document = msgspec.json.decode(line)
        if where(document):
            edit(document)
            lines[number - 1] = msgspec.json.encode(document) + b"\n"
            out.write_bytes(b"".join(lines))
            return number
    raise AssertionError("no line of the export is one to edit")


def _record_of(resource: str, *, having: str | None = None) -> Any:
    return lambda line: line.get("resource") == resource and (having is None or line["record"].get(having) is not None)


def _change_of(resource: str) -> Any:
    return lambda line: "change" in line and line["change"]["resource"] == resource


def _set(member: str, value: Any, *, within: str = "record") -> Any:
    def edit(line: dict[str, Any]) -> None:
        line[within][member] = value(line[within][member]) if callable(value) else value

    return edit


def _set_in_changed_record(member: str, value: Any) -> Any:
    def edit(line: dict[str, Any]) -> None:
        line["change"]["record"][member] = value

    return edit


FORGED = [
    ("an owner that is no e-mail address", _record_of("pets"), _set("ownerId", "alice"), "ownerId must be an e-mail"),
    ("an owner in capitals", _record_of("pets"), _set("ownerId", str.upper), 'ownerId is "BOB@'),
    ("a name of 300 characters", _record_of("pets"), _set("name", "x" * 300), "name must be 1 to 100 characters"),
    ("a malformed microchip", _record_of("pets", having="microchip"), _set("microchip", "12345"), "microchip must be"),
    ("a pet type not configured", _record_of("pets"), _set("petType", "Dragon"), "petType must be one of Dog"),
    ("an audit user", _record_of("vaccines"), _set("createdBy", "system"), "createdBy must be a user's e-mail"),
    ("a duration", _record_of("vaccines"), _set("duration", 0), "duration must be a whole number from 1 to 36500"),
    (
        "a grantee",
        _change_of("pet-shares"),
        _set_in_changed_record("grantee", "clinic-42"),
        "record: grantee must be an e-mail address, or",
    ),
    (
        "a due date before the dose",
        _record_of("pet-vaccination"),
        _set("dueAt", "1999-01-01T00:00:00.000Z"),
        "dueAt must be later than appliedAt",
    ),
    (
        "a version past 64 bits",
        _record_of("pets"),
        _set("version", 2**64 + 1),
        "version must be a whole number from 1 to 2147483647",
    ),
    ("a change by no user", _change_of("pets"), _set("by", "system", within="change"), "by must be a user's e-mail"),
    (
        "a change's version past 64 bits",
        _change_of("pets"),
        _set("version", 2**70, within="change"),
        "version must be a whole number from 1",
    ),
    (
        "a change's record",
        _change_of("pets"),
        _set_in_changed_record("name", "x" * 300),
        "record: name must be 1 to 100 characters",
    ),
    (
        "a change's record's owner",
        _change_of("pet-vaccination"),
        _set_in_changed_record("ownerId", "not an address"),
        "record: ownerId must be an e-mail address",
    ),
]


def _refusal_into_sqlite(tmp_path: Path, forged: Path) -> str:
    """Why an import of `forged` into a new SQLite database was refused; it holds nothing after."""
    url = _sqlite(tmp_path / "target", "target.sqlite3")
    target = migrated(url, tmp_path)
    with pytest.raises(CommandFailed) as refused:
        commands.import_file(target, forged)
    assert _records_and_changes(url) == (0, 0, 0, 0, 0)
    return str(refused.value)


class TestEveryValueIsChecked:
    """Every value of a file is read by its field's kind, as the API reads a client's: what the API refuses, an
    import refuses too, naming the line and the field, and writes nothing."""

    @pytest.mark.parametrize(("where", "edit", "said"), [case[1:] for case in FORGED], ids=[case[0] for case in FORGED])
    def test_a_value_the_api_refuses_is_refused(
        self, tmp_path: Path, seeded_export: Path, where: Any, edit: Any, said: str
    ) -> None:
        forged = tmp_path / "forged.jsonl"
        number = _edited(seeded_export, forged, where, edit)

        assert f"{forged}: line {number}: {said}" in _refusal_into_sqlite(tmp_path, forged)

    def test_a_vaccinations_owner_is_its_pets(self, tmp_path: Path, seeded_export: Path, target_url: str) -> None:
        """A derived value is not read: a file whose vaccination names another owner than its pet's is refused (an
        export never holds one), on either database, and nothing is written."""
        forged = tmp_path / "forged.jsonl"
        number = _edited(seeded_export, forged, _record_of("pet-vaccination"), _set("ownerId", "mallory@example.com"))
        target = migrated(target_url, tmp_path)

        with pytest.raises(CommandFailed) as refused:
            commands.import_file(target, forged)

        assert f"{forged}: line {number}: ownerId is mallory@example.com, but its petId " in str(refused.value)
        assert "a pet vaccination's ownerId is always that of its petId's record; nothing was imported" in str(
            refused.value
        )
        assert _records_and_changes(target_url) == (0, 0, 0, 0, 0)

    def test_a_line_that_is_not_utf8_is_named(self, tmp_path: Path, seeded_export: Path) -> None:
        lines = seeded_export.read_bytes().splitlines(keepends=True)
        lines[2] = lines[2].replace(b'"name":"', b'"name":"\xff', 1)
        forged = tmp_path / "forged.jsonl"
        forged.write_bytes(b"".join(lines))

        assert f"{forged}: line 3: not UTF-8 text (byte " in _refusal_into_sqlite(tmp_path, forged)

    def test_rules_of_the_clock_are_read_at_the_records_own_write(self, tmp_path: Path, seeded_export: Path) -> None:
        """A share that has expired since it was written was in the future when it was: it imports, and exports
        again as it was."""
        lines = [msgspec.json.decode(line) for line in seeded_export.read_bytes().splitlines()]
        for line in lines[1:]:
            record = line["record"] if "record" in line else line["change"]["record"]
            if record.get("expiresAt") is not None:
                record.update(
                    createdAt="2025-01-01T00:00:00.000Z",
                    modifiedAt="2025-01-01T00:00:00.000Z",
                    expiresAt="2025-06-01T00:00:00.000Z",
                )
        expired = tmp_path / "expired.jsonl"
        expired.write_bytes(b"".join(msgspec.json.encode(line) + b"\n" for line in lines))
        url = _sqlite(tmp_path / "target", "target.sqlite3")
        target = migrated(url, tmp_path)

        commands.import_file(target, expired)

        again = tmp_path / "again.jsonl"
        commands.export(target, output=again)
        assert lines_after_first(again) == lines_after_first(expired)
