"""`petrecords backup` and `petrecords restore` (contract section 13): a consistent copy taken while a server
writes, and a restore refused while a server runs, and all or nothing when it runs."""

from __future__ import annotations

import signal
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pysqlite3.dbapi2 as sqlite3
import pytest

from petrecords.portability import commands
from tests.e2e.servers import running_server
from tests.portability.support import PETRECORDS, command, lines_after_first, migrated, synthetic_export
from tests.support import ADMIN, ALICE, throwaway_postgres

pytestmark = pytest.mark.slow


def database_of(tmp_path: Path, pets: int) -> tuple[str, Path]:
    """An SQLite database in tmp_path/data holding `pets` pets, each with its change."""
    data = tmp_path / "data"
    data.mkdir()
    path = data / "petrecords.sqlite3"
    url = f"sqlite:///{path}"
    settings = migrated(url, data)
    if pets:
        source = tmp_path / "seed.jsonl"
        synthetic_export(source, pets)
        commands.import_file(settings, source)
        source.unlink()
    return url, data


@dataclass
class Writers:
    """Threads that create pets through a server until stopped, each write timed."""

    url: str
    token: str
    acknowledged: list[tuple[float, str]] = field(default_factory=list)
    """(when the answer came, the pet's id)"""
    latencies: list[tuple[float, float]] = field(default_factory=list)
    """(when the request was sent, how long it took)"""
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, threads: int) -> list[threading.Thread]:
        started = [threading.Thread(target=self._write, args=(number,)) for number in range(threads)]
        for thread in started:
            thread.start()
        return started

    def _write(self, number: int) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as client:
            count = 0
            while not self.stop.is_set():
                count += 1
                sent = time.monotonic()
                response = client.post("/v1/pets", json={"name": f"Writer {number} {count}", "petType": "Dog"})
                done = time.monotonic()
                assert response.status_code == 201, response.text
                self.latencies.append((sent, done - sent))
                self.acknowledged.append((done, response.json()["id"]))


def backup_under_writers(tmp_path: Path, pets: int) -> dict[str, float]:
    """Back up a database of `pets` pets while writers create pets through a server; check the copy; the
    writers' latencies during the backup."""
    url, data = database_of(tmp_path, pets)
    copy = tmp_path / "backup.sqlite3"
    with running_server(data, database_url=url, users=[ALICE], workers=2) as server:
        writers = Writers(server.url, server.tokens[ALICE])
        threads = writers.run(4)
        try:
            while len(writers.acknowledged) < 100:
                time.sleep(0.01)
            began = time.monotonic()
            done = command(url, data, "backup", str(copy))
            ended = time.monotonic()
            assert done.returncode == 0, done.stderr
            assert done.stderr == ""
        finally:
            writers.stop.set()
            for thread in threads:
                thread.join()
    before = {pet for when, pet in writers.acknowledged if when < began}
    during = [latency for sent, latency in writers.latencies if began <= sent <= ended]
    assert during, "no write happened during the backup"
    connection = sqlite3.connect(copy)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        held = {row[0] for row in connection.execute("SELECT id FROM pets")}
        total = connection.execute("SELECT count(*) FROM pets").fetchone()[0]
    finally:
        connection.close()
    assert {pet.replace("-", "") for pet in before} <= held
    assert total >= pets + len(before)
    during.sort()
    return {
        "backup seconds": ended - began,
        "writes during": len(during),
        "p50 ms": statistics.median(during) * 1000,
        "p99 ms": during[min(len(during) - 1, int(len(during) * 0.99))] * 1000,
        "max ms": during[-1] * 1000,
    }


class TestBackup:
    def test_a_backup_taken_while_a_server_writes_holds_every_acknowledged_write(self, tmp_path: Path) -> None:
        figures = backup_under_writers(tmp_path, 20_000)
        print(f"backup of 20,000 pets under 4 writers: {figures}")

    def test_the_copy_serves_as_it_was_and_an_existing_file_is_refused(self, tmp_path: Path) -> None:
        url, data = database_of(tmp_path, 10)
        copy = tmp_path / "copy.sqlite3"
        assert command(url, data, "backup", str(copy)).returncode == 0
        exported, again = tmp_path / "live.jsonl", tmp_path / "copy.jsonl"
        assert command(url, data, "export", "--output", str(exported)).returncode == 0
        assert command(f"sqlite:///{copy}", data, "export", "--output", str(again)).returncode == 0
        assert lines_after_first(again) == lines_after_first(exported)
        refused = command(url, data, "backup", str(copy))
        assert refused.returncode == 1
        assert refused.stderr == f"petrecords backup: {copy} exists: a backup is written to a new file\n"


class TestRestore:
    def test_refused_while_a_server_runs_then_put_in_place(self, tmp_path: Path) -> None:
        url, data = database_of(tmp_path, 10)
        backup = tmp_path / "backup.sqlite3"
        assert command(url, data, "backup", str(backup)).returncode == 0
        with running_server(data, database_url=url, users=[ALICE]) as server:
            headers = {"Authorization": f"Bearer {server.tokens[ALICE]}"}
            created = httpx.post(f"{server.url}/v1/pets", json={"name": "After", "petType": "Cat"}, headers=headers)
            assert created.status_code == 201
            refused = command(url, data, "restore", str(backup))
            assert refused.returncode == 1
            assert refused.stderr.count("\n") == 1
            assert "a server is using" in refused.stderr
            assert server.stop() == 0
        done = command(url, data, "restore", str(backup))
        assert done.returncode == 0, done.stderr
        with running_server(data, database_url=url, users=[f"{ADMIN} --admin"]) as server:
            headers = {"Authorization": f"Bearer {server.tokens[f'{ADMIN} --admin']}"}
            gone = httpx.get(f"{server.url}/v1/pets/{created.json()['id']}", headers=headers)
            assert gone.status_code == 404  # the database is the backup's: the pet created after it is not there
            listed = httpx.get(f"{server.url}/v1/pets", params={"pageSize": 1}, headers=headers).json()
            assert listed["totalCount"] == 10  # and the kept counts are the backup's

    # Long: the database must be big enough (60,000 pets) that the restore is still copying when it is killed.
    @pytest.mark.long
    def test_a_restore_killed_midway_leaves_the_database_as_it_was(self, tmp_path: Path) -> None:
        url, data = database_of(tmp_path, 60_000)
        backup = tmp_path / "backup.sqlite3"
        assert command(url, data, "backup", str(backup)).returncode == 0
        settings = migrated(url, data)
        (tmp_path / "seed.jsonl").write_bytes(b"")
        before = tmp_path / "before.jsonl"
        commands.export(settings, output=before)
        with (tmp_path / "restore.log").open("wb") as sink:
            process = subprocess.Popen(
                [str(PETRECORDS), "restore", str(backup)],
                env={"PETRECORDS_DATABASE_URL": url, "PETRECORDS_DATA_DIR": str(data), "PATH": "/usr/bin:/bin"},
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
        try:
            deadline = time.monotonic() + 120
            while not any(data.glob(".petrecords.sqlite3.*restore-partial")):
                assert process.poll() is None, (tmp_path / "restore.log").read_text()
                assert time.monotonic() < deadline, "the restore did not start copying"
                time.sleep(0.01)
            process.send_signal(signal.SIGKILL)
        finally:
            process.kill()
            process.wait()
        after = tmp_path / "after.jsonl"
        commands.export(settings, output=after)
        assert lines_after_first(after) == lines_after_first(before)


class TestOnPostgresql:
    def test_backup_and_restore_say_to_use_pg_dump_and_pg_restore(self, tmp_path: Path) -> None:
        with throwaway_postgres() as url:
            backup = command(url, tmp_path, "backup", str(tmp_path / "copy"))
            restore = command(url, tmp_path, "restore", str(tmp_path / "copy"))
        assert backup.returncode == restore.returncode == 2
        assert "back it up with pg_dump" in backup.stderr
        assert "restore it with pg_restore" in restore.stderr
        assert not (tmp_path / "copy").exists()
