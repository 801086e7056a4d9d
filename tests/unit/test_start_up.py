"""What a command imports as it starts: each `petrecords` process of a test run, a deployment's health check or an
operator's script pays for every module it imports, so the commands that need little import little."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from petrecords.client import ClientResource, client_resources
from petrecords.registry import RESOURCES

SERVER_CODE = ("sqlalchemy", "litestar", "alembic", "httpx", "nats", "petrecords.registry")
"""What the server imports and a client command never needs."""
RUN_AND_LIST_IMPORTED = f"""
import sys
from petrecords.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("imported:", *(name for name in {SERVER_CODE!r} if name in sys.modules))
"""
MIGRATE_AND_LIST_ALEMBIC = """
import sys
from petrecords.config import Settings
from petrecords.db import migrate
migrate(Settings())
print("imported:", *(name for name in ("alembic", "petrecords.registry") if name in sys.modules))
"""
IMPORT_THE_APP = """
import sys
import petrecords.app
print("imported:", *(name for name in ("nats",) if name in sys.modules))
"""


def _python(program: str, *args: str, data_dir: Path) -> str:
    env = {name: value for name, value in os.environ.items() if not name.startswith("PETRECORDS_")}
    env["PETRECORDS_DATA_DIR"] = str(data_dir)
    result = subprocess.run(
        [sys.executable, "-c", program, *args], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout.rpartition("imported:")[2].strip()


@pytest.mark.parametrize(
    "command",
    [
        ["--help"],
        ["--version"],
        ["pets", "--help"],
        # Fails at once (nothing listens on port 9), once it has parsed and read its settings as every command does.
        ["vaccinations", "list", "--token", "t", "--url", "http://127.0.0.1:9"],
    ],
    ids=" ".join,
)
def test_the_help_and_the_client_commands_start_without_the_server_code(command: list[str], tmp_path: Path) -> None:
    assert _python(RUN_AND_LIST_IMPORTED, *command, data_dir=tmp_path) == ""


def test_the_client_commands_know_every_registered_resource_as_declared() -> None:
    declared = [ClientResource(r.command, r.title, r.path, r.description) for r in RESOURCES.resources]
    assert client_resources() == declared, "src/petrecords/client_resources.json is stale: run `make reference`"


def test_migrations_run_without_the_resources_and_a_current_schema_without_alembic(tmp_path: Path) -> None:
    assert _python(MIGRATE_AND_LIST_ALEMBIC, data_dir=tmp_path) == "alembic"
    assert _python(MIGRATE_AND_LIST_ALEMBIC, data_dir=tmp_path) == ""


def test_the_app_imports_the_nats_client_only_to_publish(tmp_path: Path) -> None:
    assert _python(IMPORT_THE_APP, data_dir=tmp_path) == ""
