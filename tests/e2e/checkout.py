"""A checkout of the repository in a directory of a test's, as a fresh clone has it, for the tests that build
from one what a production install uses (`make dist`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def checkout(directory: Path) -> Path:
    """The repository's files (tracked, and new ones git does not ignore) as they are in the working tree, copied
    into `directory`, which is returned. Its `.venv` is the repository's, so that make finds its tools there
    instead of installing them again."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if not source.is_file():
            continue  # deleted in the working tree, not yet in the index
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    (directory / ".venv").symlink_to(ROOT / ".venv")
    return directory


def make_dist(directory: Path) -> Path:
    """`make dist` run in the checkout `directory`: its dist/, holding the wheel and requirements.txt."""
    done = subprocess.run(["make", "dist"], cwd=directory, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"make dist failed:\n{done.stdout}\n{done.stderr}"
    return directory / "dist"
