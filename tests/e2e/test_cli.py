"""The operator's command line: startup failures in one clear line, --version and help, `petrecords token`, and
the client commands against a running server."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from petrecords.portability.records import counted
from petrecords.portability.transfer import in_load_order
from petrecords.registry import RESOURCES
from tests.e2e.servers import PETRECORDS, Server, running_server
from tests.portability.support import synthetic_export

pytestmark = pytest.mark.slow


def _run(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    base = {name: value for name, value in os.environ.items() if not name.startswith("PETRECORDS_")}
    return subprocess.run(
        [str(PETRECORDS), *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _one_line_failure(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert result.returncode != 0, result
    lines = [line for line in result.stderr.splitlines() if not line.startswith("{")]  # JSON log lines aside
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for text in expected:
        assert text in lines[0], lines[0]


BAD_SETTINGS = [
    ({"PETRECORDS_DATABASE_URL": "garbage"}, "PETRECORDS_DATABASE_URL"),
    ({"PETRECORDS_DATABASE_URL": "mysql://pets:hunter2@db/pets"}, "PETRECORDS_DATABASE_URL"),
    ({"PETRECORDS_REDIS_URL": "garbage"}, "PETRECORDS_REDIS_URL"),
    ({"PETRECORDS_REDIS_URL": "redis://cache:port/0"}, "PETRECORDS_REDIS_URL"),
    (
        {
            "PETRECORDS_DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/postgres",
            "PETRECORDS_REDIS_URL": "redis://127.0.0.1:6379/0",
            "PETRECORDS_DATABASE_READ_URLS": "mysql://replica/pets",
        },
        "PETRECORDS_DATABASE_READ_URLS",
    ),
    (
        {
            "PETRECORDS_DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/postgres",
            "PETRECORDS_REDIS_URL": "redis://127.0.0.1:6379/0",
            "PETRECORDS_DATABASE_READ_URLS": "postgresql://replica/pets,not a url",
        },
        "PETRECORDS_DATABASE_READ_URLS",
    ),
    ({"PETRECORDS_AUTH_MODE": "jwks"}, "PETRECORDS_AUTH_JWKS_URL"),
    ({"PETRECORDS_NATS_URL": "garbage"}, "PETRECORDS_NATS_URL"),
    ({"PETRECORDS_RATELIMIT": "100"}, "did you mean PETRECORDS_RATE_LIMIT?"),
    ({"PETRECORDS_DATABASE_URL": "sqlite:///no-such-folder/pets.sqlite3"}, "PETRECORDS_DATABASE_URL"),
]
"""Settings each refused in one line naming the setting, before anything is done."""


class TestStartupFailures:
    def test_a_setting_out_of_range(self, tmp_path: Path) -> None:
        result = _run("serve", "--port", "0", cwd=tmp_path, env={"PETRECORDS_DB_POOL_SIZE": "0"})

        _one_line_failure(result, "PETRECORDS_DB_POOL_SIZE")

    def test_a_short_secret(self, tmp_path: Path) -> None:
        result = _run("serve", "--port", "0", cwd=tmp_path, env={"PETRECORDS_AUTH_SECRET": "short"})

        _one_line_failure(result, "PETRECORDS_AUTH_SECRET", "32 bytes")

    def test_an_unreachable_database_without_showing_its_password(self, tmp_path: Path) -> None:
        url = "postgresql://postgres:hunter2hunter2@127.0.0.1:1/petrecords"
        result = _run("serve", "--port", "0", cwd=tmp_path, env={"PETRECORDS_DATABASE_URL": url})

        _one_line_failure(result, "PETRECORDS_DATABASE_URL", "cannot migrate")
        assert "hunter2" not in result.stderr

    def test_a_data_directory_that_cannot_be_made(self, tmp_path: Path) -> None:
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        result = _run("serve", "--port", "0", cwd=tmp_path, env={"PETRECORDS_DATA_DIR": str(blocker / "data")})

        _one_line_failure(result, "PETRECORDS_DATA_DIR")

    @pytest.mark.parametrize(("settings", "named"), BAD_SETTINGS)
    def test_a_bad_setting_is_one_line_before_anything_is_served(
        self, tmp_path: Path, settings: dict[str, str], named: str
    ) -> None:
        self._refused("serve", tmp_path, settings, named)

    @pytest.mark.parametrize(("settings", "named"), [BAD_SETTINGS[1], BAD_SETTINGS[-2], BAD_SETTINGS[-1]])
    def test_a_bad_setting_is_one_line_before_anything_is_migrated(
        self, tmp_path: Path, settings: dict[str, str], named: str
    ) -> None:
        self._refused("migrate", tmp_path, settings, named)

    @staticmethod
    def _refused(command: str, tmp_path: Path, settings: dict[str, str], named: str) -> None:
        arguments = [command, "--port", "0"] if command == "serve" else [command]
        result = _run(*arguments, cwd=tmp_path, env={"PETRECORDS_DATA_DIR": str(tmp_path / "data"), **settings})

        _one_line_failure(result, f"petrecords {command}: ", named)
        assert result.returncode == 1
        assert "hunter2" not in result.stderr
        assert not result.stdout  # nothing migrated, nothing served, no log line
        assert list(tmp_path.iterdir()) == []  # no data directory, secret or database made

    def test_the_data_directory_is_made_when_missing(self, tmp_path: Path) -> None:
        data_dir = tmp_path / "new" / "data"
        result = _run("migrate", cwd=tmp_path, env={"PETRECORDS_DATA_DIR": str(data_dir)})

        assert result.returncode == 0, result.stderr
        assert (data_dir / "petrecords.sqlite3").is_file()

    def test_a_busy_port(self, tmp_path: Path) -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            result = _run("serve", "--port", str(port), cwd=tmp_path)

        _one_line_failure(result, f"--port {port}", "already in use")


class TestHelp:
    def test_version(self, tmp_path: Path) -> None:
        result = _run("--version", cwd=tmp_path)

        assert result.returncode == 0
        assert result.stdout.startswith("petrecords ")

    def test_serve_help_lists_defaults_and_settings(self, tmp_path: Path) -> None:
        result = _run("serve", "--help", cwd=tmp_path)

        assert "(default: 8000)" in result.stdout
        assert "(default: 2)" in result.stdout
        for setting in ("PETRECORDS_DATABASE_URL", "PETRECORDS_DATA_DIR", "PETRECORDS_AUTH_SECRET"):
            assert setting in result.stdout


class TestToken:
    def test_it_imports_neither_the_web_framework_nor_the_database_layer(self) -> None:
        """What keeps it fast: a token needs settings and a signature, nothing else."""
        probe = (
            "import sys; from petrecords.cli import main\n"
            "try:\n    main(['token', '--user', 'a@example.com'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('litestar', 'sqlalchemy', 'granian', 'asyncpg') if m in sys.modules))"
        )
        result = subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, "PETRECORDS_AUTH_SECRET": "x" * 40},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

        assert result.stdout.strip().splitlines()[-1] == "[]", result

    def test_no_secret_is_a_clear_refusal_and_none_is_made(self, tmp_path: Path) -> None:
        result = _run("token", "--user", "a@example.com", cwd=tmp_path)

        _one_line_failure(result, "no signing secret", str(tmp_path / "data" / "auth-secret"))
        assert not (tmp_path / "data").exists()

    def test_jwks_mode_is_refused(self, tmp_path: Path) -> None:
        result = _run("token", "--user", "a@example.com", cwd=tmp_path, env={"PETRECORDS_AUTH_MODE": "jwks"})

        _one_line_failure(result, "PETRECORDS_AUTH_MODE is jwks")

    def test_it_says_where_the_secret_is(self, tmp_path: Path) -> None:
        result = _run("token", "--user", "a@example.com", cwd=tmp_path, env={"PETRECORDS_AUTH_SECRET": "s" * 40})

        assert result.returncode == 0
        assert result.stderr.strip() == "petrecords token: signed with the secret in PETRECORDS_AUTH_SECRET"
        assert result.stdout.count(".") == 2  # a JWT, alone on standard output


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("cli") / "data"
    with running_server(
        data_dir, users=["admin@example.com --admin"], settings={"PETRECORDS_RATE_LIMIT": "0"}
    ) as started:
        yield started


def _client(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PETRECORDS_URL": server.url, "PETRECORDS_TOKEN": server.tokens["admin@example.com --admin"]}
    return _run(*args, cwd=server.data_dir.parent, env=env)


class TestClientCommands:
    def test_a_round_trip_over_every_resource(self, server: Server) -> None:
        pet = json.loads(_client(server, "pets", "create", "name=Rex", "petType=Dog", "--json").stdout)
        vaccine = json.loads(
            _client(server, "vaccines", "create", "name=Rabies", "petType=Dog", "duration=365", "--json").stdout
        )
        given = _client(
            server,
            "vaccinations",
            "create",
            f"petId={pet['id']}",
            f"vaccineId={vaccine['id']}",
            "appliedAt=2026-01-01T00:00:00Z",
            "--json",
        )
        listed = json.loads(_client(server, "vaccinations", "list", f"petId={pet['id']}", "--json").stdout)
        table = _client(server, "pets", "list")
        history = json.loads(_client(server, "pets", "history", pet["id"], "--json").stdout)
        deleted = _client(server, "pets", "delete", pet["id"])

        assert json.loads(given.stdout)["dueAt"] == "2027-01-01T00:00:00.000Z"
        assert [item["vaccine"]["name"] for item in listed["items"]] == ["Rabies"]
        assert "Rex" in table.stdout
        assert "1 in all" in table.stdout
        assert [item["action"] for item in history["items"]] == ["created"]
        assert deleted.returncode == 0
        assert "name: Rex" in deleted.stdout

    def test_an_error_answer_fails_with_its_code(self, server: Server) -> None:
        result = _client(server, "pets", "get", "01890a5d-ac96-774b-bcce-b302099a8057")

        assert result.returncode == 1
        assert "404 (995)" in result.stderr

    def test_no_token_is_a_clear_refusal(self, server: Server) -> None:
        result = _run("pets", "list", "--url", server.url, cwd=server.data_dir.parent)

        _one_line_failure(result, "no token")

    def test_an_unreachable_server_is_a_clear_refusal(self, tmp_path: Path) -> None:
        result = _run("pets", "list", "--url", "http://127.0.0.1:1", "--token", "x", cwd=tmp_path)

        _one_line_failure(result, "cannot reach the server")


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Records each request's path and Authorization header. With `redirect_to` set, it answers every path but
    those under /moved with a redirect to `redirect_to` + /moved + the path; otherwise with an empty page."""

    redirect_to: str | None = None
    seen: list[tuple[str, str | None]]

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        if self.redirect_to is not None and not self.path.startswith("/moved/"):
            self.send_response(302)
            self.send_header("Location", f"{self.redirect_to}/moved{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b'{"items": [], "pageIndex": 1, "pageSize": 20, "totalPages": 0, "totalCount": 0}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@contextlib.contextmanager
def _http_server(redirect_to: str | None) -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """A real HTTP server on a free port of its own: its URL, and the requests it received."""
    seen: list[tuple[str, str | None]] = []
    handler = type("Handler", (_Recorder,), {"redirect_to": redirect_to, "seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class TestClientRedirects:
    def test_the_token_follows_a_redirect_within_the_origin_only(self, tmp_path: Path) -> None:
        with _http_server("") as (server, asked):  # a relative Location: the same server
            within = _run("pets", "list", "--url", server, "--token", "the-token", "--json", cwd=tmp_path)
        with _http_server(None) as (elsewhere, reached), _http_server(elsewhere) as (server, redirected):
            away = _run("pets", "list", "--url", server, "--token", "the-token", cwd=tmp_path)

        assert within.returncode == 0, within.stderr
        assert asked == [("/v1/pets?", "Bearer the-token"), ("/moved/v1/pets", "Bearer the-token")]
        _one_line_failure(away, f"--url {server}", f"redirected to {elsewhere}")
        assert redirected == [("/v1/pets?", "Bearer the-token")]
        assert reached == []


NEWER_REVISION = "20991231_9999"
"""A schema revision that no migration of this version knows: as a newer version leaves a database."""


@pytest.fixture(scope="module")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database this version migrated, with one pet and its change, made once: tests copy it."""
    data_dir = tmp_path_factory.mktemp("migrated") / "data"
    result = _run("migrate", cwd=data_dir.parent, env={"PETRECORDS_DATA_DIR": str(data_dir)})
    assert result.returncode == 0, result.stderr
    database = data_dir / "petrecords.sqlite3"
    connection = sqlite3.connect(database)
    try:
        connection.execute("PRAGMA journal_mode = DELETE")  # one file, to copy
    finally:
        connection.close()
    return database


def _copy_of(database: Path, tmp_path: Path, *, revision: str | None = None) -> Path:
    data_dir = tmp_path / "data"
    data_dir.mkdir(parents=True)
    copy = data_dir / "petrecords.sqlite3"
    shutil.copyfile(database, copy)
    if revision is not None:
        _execute(copy, "UPDATE alembic_version SET version_num = ?", revision)
    return copy


def _execute(database: Path, statement: str, *parameters: str) -> None:
    """One statement, committed, in the SQLite database at `database` (made when missing)."""
    connection = sqlite3.connect(database)
    try:
        with connection:
            connection.execute(statement, parameters)
    finally:
        connection.close()


def _data_env(database: Path) -> dict[str, str]:
    return {"PETRECORDS_DATA_DIR": str(database.parent)}


def _contents(database: Path) -> list[str]:
    """What the database holds, schema and rows (not its file's header: opening it in WAL mode rewrites that)."""
    connection = sqlite3.connect(database)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


class TestDataCommandsOnANewerSchema:
    """A database whose schema a newer version made: every command that would migrate it says so in one line, exit
    status 1, and writes nothing."""

    @pytest.mark.parametrize(
        "arguments",
        [["migrate"], ["export", "--output", "out.jsonl"], ["backup", "copy.sqlite3"], ["serve", "--port", "0"]],
        ids=lambda arguments: arguments[0],
    )
    def test_each_command_is_one_line_and_writes_nothing(
        self, tmp_path: Path, migrated_database: Path, arguments: list[str]
    ) -> None:
        database = _copy_of(migrated_database, tmp_path, revision=NEWER_REVISION)
        before = _contents(database)

        result = _run(*arguments, cwd=tmp_path, env=_data_env(database))

        _one_line_failure(result, f"petrecords {arguments[0]}: ", f"revision {NEWER_REVISION}", "a newer version")
        assert result.returncode == 1
        assert _contents(database) == before
        assert sorted(path.name for path in tmp_path.iterdir()) == ["data"]

    def test_import_is_one_line_and_writes_nothing(self, tmp_path: Path, migrated_database: Path) -> None:
        database = _copy_of(migrated_database, tmp_path, revision=NEWER_REVISION)
        before = _contents(database)
        export = tmp_path / "export.jsonl"
        export.write_text('{"format":"petrecords-export","version":1,"exportedAt":"2026-01-01T00:00:00.000Z"}\n')

        result = _run("import", str(export), cwd=tmp_path, env=_data_env(database))

        _one_line_failure(result, "petrecords import: ", f"revision {NEWER_REVISION}", "a newer version")
        assert result.returncode == 1
        assert _contents(database) == before


class TestOwnerOnlyFiles:
    def test_a_database_that_migrate_makes_is_owner_only(self, tmp_path: Path) -> None:
        data_dir = tmp_path / "data"
        result = _run("migrate", cwd=tmp_path, env={"PETRECORDS_DATA_DIR": str(data_dir)})

        assert result.returncode == 0, result.stderr
        assert stat.S_IMODE((data_dir / "petrecords.sqlite3").stat().st_mode) == 0o600


def _restore(database: Path, backup: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return _run("restore", str(backup), cwd=tmp_path, env=_data_env(database))


class TestRestoreRefuses:
    """What is not a complete Pet Records database of this version or an earlier one: one line, exit status 1, the
    database as it was."""

    def test_a_backup_a_newer_version_made(self, tmp_path: Path, migrated_database: Path) -> None:
        database = _copy_of(migrated_database, tmp_path)
        backup = tmp_path / "newer.sqlite3"
        shutil.copyfile(_copy_of(migrated_database, tmp_path / "newer", revision=NEWER_REVISION), backup)
        before = _contents(database)

        result = _restore(database, backup, tmp_path)

        _one_line_failure(
            result, f"petrecords restore: {backup}: ", f"revision {NEWER_REVISION}", "nothing was restored"
        )
        assert result.returncode == 1
        assert _contents(database) == before

    def test_a_database_with_a_table_missing(self, tmp_path: Path, migrated_database: Path) -> None:
        database = _copy_of(migrated_database, tmp_path)
        backup = _copy_of(migrated_database, tmp_path / "damaged")
        _execute(backup, "DROP TABLE pet_shares")
        before = _contents(database)

        result = _restore(database, backup, tmp_path)

        _one_line_failure(result, "not a complete petrecords database: it has no table pet_shares", "nothing was")
        assert result.returncode == 1
        assert _contents(database) == before

    @pytest.mark.parametrize("foreign", ["text", "another application's database"])
    def test_a_foreign_file(self, tmp_path: Path, migrated_database: Path, foreign: str) -> None:
        database = _copy_of(migrated_database, tmp_path)
        backup = tmp_path / "foreign"
        if foreign == "text":
            backup.write_text("not a database\n")
        else:
            _execute(backup, "CREATE TABLE notes (body TEXT)")
        before = _contents(database)

        result = _restore(database, backup, tmp_path)

        _one_line_failure(result, f"petrecords restore: {backup}: not a")
        assert result.returncode == 1
        assert _contents(database) == before


class TestDataCommandsSayWhatTheyDid:
    """One line of result on standard output, nothing on standard error; every file they make owner-only."""

    def test_import_backup_and_restore(self, tmp_path: Path, migrated_database: Path) -> None:
        database = _copy_of(migrated_database, tmp_path)
        export = tmp_path / "three.jsonl"
        synthetic_export(export, 3)

        imported = _run("import", str(export), cwd=tmp_path, env=_data_env(database))
        backed_up = _run("backup", str(tmp_path / "backup.sqlite3"), cwd=tmp_path, env=_data_env(database))
        exported = _run("export", "--output", str(tmp_path / "out.jsonl"), cwd=tmp_path, env=_data_env(database))
        restored = _run("restore", str(tmp_path / "backup.sqlite3"), cwd=tmp_path, env=_data_env(database))

        # An import counts in the order it loads (referenced resources first), the others as registered.
        loaded = counted({resource.name: 3 if resource.name == "pets" else 0 for resource in in_load_order(RESOURCES)})
        counts = counted({resource.name: 3 if resource.name == "pets" else 0 for resource in RESOURCES.resources})
        assert (imported.returncode, imported.stderr) == (0, "")
        assert imported.stdout == f"imported {export}: {loaded} and 3 changes\n"
        assert (backed_up.returncode, backed_up.stderr) == (0, "")
        size = (tmp_path / "backup.sqlite3").stat().st_size
        assert backed_up.stdout == f"backed up {database} to {tmp_path / 'backup.sqlite3'} ({size} bytes): {counts}\n"
        assert (restored.returncode, restored.stderr) == (0, "")
        assert restored.stdout == f"restored {tmp_path / 'backup.sqlite3'} in place of {database}: {counts}\n"
        assert (exported.returncode, exported.stdout, exported.stderr) == (0, "", "")
        for made in (tmp_path / "backup.sqlite3", tmp_path / "out.jsonl", database):
            assert stat.S_IMODE(made.stat().st_mode) == 0o600, made


class TestImportRefusesInOneLine:
    @pytest.mark.parametrize(
        ("damage", "said"),
        [
            (lambda line: line.replace(b'"name":"', b'"name":"\xff\xfe'), "line 2: not UTF-8 text (byte "),
            (lambda line: line.replace(b'"version":1', b'"version":18446744073709551617'), "line 2: version must be"),
        ],
        ids=["not UTF-8", "a version past 64 bits"],
    )
    def test_a_damaged_line(self, tmp_path: Path, migrated_database: Path, damage: Any, said: str) -> None:
        database = _copy_of(migrated_database, tmp_path)
        export = tmp_path / "one.jsonl"
        synthetic_export(export, 1)
        header, line, *rest = export.read_bytes().splitlines(keepends=True)
        export.write_bytes(b"".join([header, damage(line), *rest]))
        before = _contents(database)

        result = _run("import", str(export), cwd=tmp_path, env=_data_env(database))

        _one_line_failure(result, f"petrecords import: {export}: {said}")
        assert result.returncode == 1
        assert _contents(database) == before
