"""`make test-quick`: the tests of one change, on SQLite only, in seconds rather than the whole suite's minutes.

The change is every file that differs from the branch point with `main` (committed, staged or not) and every new
file git does not ignore. Each changed file leads to the test files that are about it:

- a test file: itself; another file of tests/ (support.py, a helper server): the test files that import it;
- a module of src/ or of tests/: the test files that import it (`import petrecords.store.sql`, `from
  petrecords.store import sql`, `from petrecords.store.sql import …`) and those named after it (`access.py`:
  `test_access.py`; `sqlite.py`: `test_sqlite_*.py`);
- shared machinery that few tests import by name but every request passes (the resource layer, the store, the
  edge): the few API test files of SHARED, which walk every layer;
- a file of bench/: the tests that load it (`bench_module("run")`); the documentation, the settings and errors
  (whose reference pages are generated), a migration, the Makefile: the tests of OTHER.

The tests run with `-m "not long"` and without their PostgreSQL variants (any test parametrised with the value
"postgresql", whatever the parameter's name: see `pytest_collection_modifyitems` below), the last run's failures
first (`--ff`). When nothing changed, or no test is about what changed, it runs again the last run's failures
(`--lf`), if there were any. `make test` remains the check before a merge: it runs both databases, the long way
round, and every test that a change reaches only through another module.

    .venv/bin/python -m tests.quick            # what `make test-quick` runs
    .venv/bin/python -m tests.quick --list     # the changed files and their tests, without running them
    .venv/bin/python -m tests.quick -- -x -k create   # anything after -- goes to pytest
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASE = "main"

API_WALK = ("tests/api/test_create.py", "tests/api/test_get.py", "tests/api/test_list.py")
"""Pets created, read and listed over HTTP: every layer of a request, from the edge to the store, on both ways in
(the framework's routes and the direct ones)."""

SHARED: dict[str, tuple[str, ...]] = {
    "src/petrecords/resources/*.py": API_WALK,
    "src/petrecords/store/*.py": (*API_WALK, "tests/api/test_changes_feed.py"),
    "src/petrecords/changes/*.py": ("tests/api/test_changes_feed.py", "tests/unit/test_change_hub.py"),
    "src/petrecords/tables.py": (*API_WALK, "tests/store/test_migrations.py"),
    "src/petrecords/endpoints.py": ("tests/api/test_endpoint_table.py", "tests/api/test_direct_routes.py"),
    "src/petrecords/routes.py": ("tests/api/test_endpoint_table.py", "tests/api/test_direct_routes.py"),
    "src/petrecords/http.py": ("tests/api/test_errors_and_headers.py", "tests/api/test_cors.py"),
    "src/petrecords/app.py": API_WALK,
    "src/petrecords/services.py": API_WALK,
    "src/petrecords/responses.py": ("tests/api/test_errors_and_headers.py",),
    "src/petrecords/registry.py": ("tests/api/test_endpoint_table.py", "tests/fuzz/test_model.py"),
    "src/petrecords/pets.py": (*API_WALK, "tests/api/test_replace.py", "tests/api/test_update.py"),
    "src/petrecords/vaccinations.py": ("tests/api/test_pet_vaccinations.py",),
    "src/petrecords/openapi_document.py": ("tests/api/test_ops.py", "tests/unit/test_openapi_patterns.py"),
    "src/petrecords/openapi.py": ("tests/api/test_ops.py", "tests/unit/test_openapi_patterns.py"),
    "src/petrecords/jwks.py": ("tests/api/test_auth_jwks.py",),
    "src/petrecords/client.py": ("tests/e2e/test_cli.py",),
    "src/petrecords/portability/databases.py": (
        "tests/portability/test_transfer.py",
        "tests/portability/test_backup.py",
    ),
    "src/petrecords/certificates/fontfile.py": ("tests/certificates/test_document.py",),
    "src/petrecords/db.py": ("tests/store/test_migrations.py", "tests/store/test_sqlite_engine.py"),
    "tests/conftest.py": API_WALK,
    "tests/e2e/servers.py": ("tests/e2e/test_serve.py",),
}
"""Shared machinery, by path pattern: tests that reach it through a request rather than by importing it, or by
importing it from too many test files to run them all (WIDE)."""

WIDE = 10
"""A module that more test files import than this is imported for what it lends them (the settings, the app, the
test helpers, the errors to expect), not tested by each: it leads to the tests named after it and to those of
SHARED and OTHER. Eight modules are wider: tests/support.py is imported by 88 test files, the settings by 49, the
app by 27, the errors by 14, ids and timestamps (values.py) by 11; the registry, by 10, is not."""

OTHER: dict[str, tuple[str, ...]] = {
    "docs/*": ("tests/docs/test_site.py",),
    "docs/how-to/*": ("tests/docs/test_how_to.py",),
    "docs/tutorial.md": ("tests/docs/test_how_to.py",),
    "docs/reference/*": ("tests/docs/test_reference.py",),
    "docs/reference.py": ("tests/docs/test_reference.py",),
    "mkdocs.yml": ("tests/docs/test_site.py",),
    "README.md": ("tests/docs/test_site.py", "tests/docs/test_how_to.py"),
    "CHANGELOG.md": ("tests/docs/test_site.py",),
    "bench/README.md": ("tests/docs/test_site.py",),
    "bench/results/*": ("tests/docs/test_site.py",),
    "CONTRIBUTING.md": ("tests/docs/test_contributing.py",),
    "docs/explanation/architecture.md": ("tests/docs/test_contributing.py",),
    "src/petrecords/*.py": ("tests/docs/test_contributing.py",),  # a module added, moved or renamed: the map
    "src/petrecords/config.py": ("tests/docs/test_reference.py",),
    "src/petrecords/errors.py": ("tests/docs/test_reference.py",),
    "src/petrecords/cli.py": ("tests/docs/test_reference.py",),
    "src/petrecords/migrations/*": ("tests/store/test_migrations.py",),
    "Makefile": ("tests/test_suite_options.py",),
    "pyproject.toml": ("tests/test_suite_options.py",),
}
"""Files that are not Python modules, or whose tests read them rather than import them, by path pattern."""


@dataclass
class Plan:
    """What a change runs: each changed file with the test files it leads to (none: no test is about it)."""

    changed: dict[str, list[str]] = field(default_factory=dict)

    @property
    def tests(self) -> list[str]:
        return sorted({test for tests in self.changed.values() for test in tests})

    @property
    def untested(self) -> list[str]:
        return [path for path, tests in self.changed.items() if not tests]


def module_of(path: str) -> str | None:
    """The dotted name a Python file is imported by (`src/petrecords/store/sql.py`: `petrecords.store.sql`;
    `tests/support.py`: `tests.support`), or None for a file that is no module of a package."""
    if not path.endswith(".py"):
        return None
    parts = list(Path(path).with_suffix("").parts)
    if parts[0] == "src":
        parts = parts[1:]
    elif parts[0] != "tests":
        return None
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) if parts else None


def imported_by(source: str) -> set[str]:
    """Every module a file imports: `from a.b import c` counts as a.b and a.b.c, since c may be a module."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_files(root: Path) -> list[str]:
    return sorted(path.relative_to(root).as_posix() for path in (root / "tests").rglob("test_*.py"))


def _named_after(test: str, module: Path, packages: set[str]) -> bool:
    """Whether a test file is named after a module (`test_access.py`, `test_sqlite_engine.py` of `sqlite.py`), and
    is not the test of another package's module of that name (tests/certificates/test_document.py is not about
    petrecords/document.py)."""
    stem = Path(test).stem
    if stem != f"test_{module.stem}" and not stem.startswith(f"test_{module.stem}_"):
        return False
    folder = Path(test).parent.name
    return folder not in packages or folder == module.parent.name


def plan(changed: Iterable[str], root: Path = ROOT) -> Plan:
    """The test files each changed file leads to (paths relative to `root`, as git names them)."""
    tests = test_files(root)
    sources = {test: (root / test).read_text(encoding="utf-8") for test in tests}
    imports = {test: imported_by(source) for test, source in sources.items()}
    packages = {path.parent.name for path in (root / "src" / "petrecords").glob("*/__init__.py")}
    result = Plan()
    for path in changed:
        found: set[str] = set()
        name = Path(path).name
        module = module_of(path)
        if path.startswith("tests/") and name.startswith("test_") and name.endswith(".py"):
            found.add(path)  # a test file itself, not those that borrow a helper of it
        elif module is not None:
            importers = [test for test in tests if module in imports[test]]
            if len(importers) <= WIDE:
                found.update(importers)
        if module is not None and name != "__init__.py":
            found.update(test for test in tests if _named_after(test, Path(path), packages))
        if path.startswith("bench/") and path.endswith(".py"):
            loaded = (f'bench_module("{Path(path).stem}")', path)
            found.update(test for test, source in sources.items() if any(mark in source for mark in loaded))
        for table in (SHARED, OTHER):
            for pattern, named in table.items():
                if fnmatch.fnmatch(path, pattern):
                    found.update(named)
        result.changed[path] = sorted(test for test in found if (root / test).is_file())
    return result


def changed_files(root: Path = ROOT, base: str = BASE) -> list[str]:
    """Every file that differs from the branch point with `base`, committed or not, and every new file."""

    def git(*args: str) -> list[str]:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
        return [line for line in done.stdout.splitlines() if line]

    branch_point = git("merge-base", "HEAD", base)[0]
    return sorted({*git("diff", "--name-only", branch_point), *git("ls-files", "--others", "--exclude-standard")})


POSTGRESQL = "postgresql"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `-p tests.quick`: the PostgreSQL variant of every test parametrised over the databases is left out."""
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        values = callspec.params.values() if callspec is not None else ()
        (dropped if any(value == POSTGRESQL for value in values) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def last_failed(root: Path = ROOT) -> list[str]:
    """The test files of the last run's failures, as pytest's cache keeps them, that still exist."""
    try:
        failed = json.loads((root / ".pytest_cache" / "v" / "cache" / "lastfailed").read_text())
    except (OSError, ValueError):
        return []
    files = {str(node).split("::")[0] for node in failed} if isinstance(failed, dict) else set()
    return sorted(file for file in files if (root / file).is_file())


def run_command(tests: Sequence[str], extra: Sequence[str] = (), *, failed: Sequence[str] = ()) -> list[str]:
    """The pytest run of a plan's tests; with none, of the last run's failures (`--lf`), collected from their files
    alone rather than from the whole suite, which takes seconds."""
    command = [sys.executable, "-m", "pytest", "-p", "tests.quick", "-n", "0", "-m", "not long", *extra]
    if tests:
        return [*command, "--ff", *tests]
    return [*command, "--lf", *failed]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.quick", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=BASE, help="the branch the change is measured from (default: main)")
    parser.add_argument("--list", action="store_true", help="print the changed files and their tests, run nothing")
    parser.add_argument("pytest_args", nargs="*", help="after --: given to pytest as they are")
    arguments = parser.parse_args(argv)
    try:
        changed = changed_files(ROOT, arguments.base)
    except subprocess.CalledProcessError as failed:
        print(f"Which files changed is unknown: git {' '.join(failed.cmd[1:])} failed: {failed.stderr.strip()}")
        return 2
    found = plan(changed)
    for path, tests in found.changed.items():
        print(f"{path}: {', '.join(tests) if tests else 'no test is about it'}")
    if not found.changed:
        print(f"Nothing differs from {arguments.base}.")
    failed = [] if found.tests else last_failed()
    if not found.tests:
        if not failed:
            print("No test is about it, and none failed in the last run: nothing to run.")
            return 0
        print(f"No test is about it: the last run's failures run again ({', '.join(failed)}).")
    command = run_command(found.tests, arguments.pytest_args, failed=failed)
    print(shlex.join(["python", *command[1:]]), flush=True)
    if arguments.list:
        return 0
    status = subprocess.run(command, cwd=ROOT, check=False).returncode
    if status == pytest.ExitCode.NO_TESTS_COLLECTED:
        print("No test ran: only PostgreSQL variants or long tests are about the change.")
        return 0
    return status


if __name__ == "__main__":
    sys.exit(main())
