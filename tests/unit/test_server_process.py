"""What a server process sets up for itself when the HTTP server builds its app there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import gc
from petrecords.app import create_app_from_environment
create_app_from_environment()
print(gc.get_freeze_count(), sum(gc.get_count()))
"""


def test_the_app_factory_leaves_what_lives_as_long_as_the_process_out_of_garbage_collection(tmp_path: Path) -> None:
    """Run in a process of its own, as the server runs it: freezing is for the rest of the process's life."""
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("PETRECORDS_")},
        "PETRECORDS_DATA_DIR": str(tmp_path),
        "PETRECORDS_DATABASE_URL": f"sqlite:///{tmp_path / 'pets.sqlite3'}",
        "PETRECORDS_AUTH_SECRET": "x" * 48,
    }
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    frozen, pending = map(int, result.stdout.split())
    # The modules and the app: tens of thousands of objects that no collection walks again.
    assert frozen > 50_000, result.stdout
    assert pending < 1_000, result.stdout


PRELOAD_PROBE = """
import gc, sys
from petrecords.serve import APP_FACTORY, _preload_app
_preload_app()
print(APP_FACTORY.partition(":")[0] in sys.modules, gc.get_freeze_count())
"""


def test_the_server_imports_the_app_once_for_every_worker_it_forks(tmp_path: Path) -> None:
    """Imported and frozen in the server before Granian forks: a worker only makes its app."""
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("PETRECORDS_")},
        "PETRECORDS_DATA_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "-c", PRELOAD_PROBE], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    imported, frozen = result.stdout.split()
    assert imported == "True", result.stdout
    assert int(frozen) > 50_000, result.stdout
