"""`make test-quick` (tests/quick.py): which tests a change leads to, which files a change is, and that its run
leaves out the PostgreSQL variants."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import quick

ROOT = Path(__file__).resolve().parents[1]


def _tree(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A repository's files in small: three modules, a package of the same module name, tests of each kind."""
    return _tree(
        tmp_path,
        {
            "src/petrecords/access.py": "",
            "src/petrecords/document.py": "",
            "src/petrecords/sqlite.py": "",
            "src/petrecords/certificates/__init__.py": "",
            "src/petrecords/certificates/document.py": "",
            "tests/support.py": "",
            "tests/test_sqlite_engine.py": "",
            "tests/unit/test_access.py": "",
            "tests/api/test_imports_module.py": "import petrecords.sqlite\n",
            "tests/api/test_imports_from_package.py": "from petrecords import access, document\n",
            "tests/api/test_imports_a_name.py": "from petrecords.access import granted\nfrom tests.support import x\n",
            "tests/api/test_imports_nothing.py": "from petrecords.accessories import hat\n",
            "tests/certificates/test_document.py": "",
            "tests/docs/test_site.py": "from tests.support import ROOT\n",
            "tests/test_bench_run.py": 'from tests.support import bench_module\nrun = bench_module("run")\n',
        },
    )


def test_a_module_leads_to_every_test_that_imports_it_however_it_is_imported(tree: Path) -> None:
    found = quick.plan(["src/petrecords/access.py"], tree).changed["src/petrecords/access.py"]

    assert "tests/api/test_imports_from_package.py" in found  # from petrecords import access
    assert "tests/api/test_imports_a_name.py" in found  # from petrecords.access import granted
    assert "tests/api/test_imports_nothing.py" not in found  # petrecords.accessories is another module
    assert quick.plan(["src/petrecords/sqlite.py"], tree).tests == [
        "tests/api/test_imports_module.py",  # import petrecords.sqlite
        "tests/test_sqlite_engine.py",  # named after it
    ]


def test_a_module_leads_to_the_tests_named_after_it_but_not_another_packages(tree: Path) -> None:
    assert "tests/unit/test_access.py" in quick.plan(["src/petrecords/access.py"], tree).tests
    top = quick.plan(["src/petrecords/document.py"], tree).tests
    assert top == ["tests/api/test_imports_from_package.py"]
    assert quick.plan(["src/petrecords/certificates/document.py"], tree).tests == [
        "tests/certificates/test_document.py"
    ]


def test_a_test_file_leads_to_itself_and_a_helper_to_the_tests_that_import_it(tree: Path) -> None:
    assert quick.plan(["tests/unit/test_access.py"], tree).tests == ["tests/unit/test_access.py"]
    assert quick.plan(["tests/support.py"], tree).tests == [
        "tests/api/test_imports_a_name.py",
        "tests/docs/test_site.py",
        "tests/test_bench_run.py",
    ]


def test_a_module_that_too_many_tests_import_leads_only_to_its_own(tmp_path: Path) -> None:
    importers = {f"tests/api/test_{n}.py": "from petrecords.values import now_ms\n" for n in range(quick.WIDE + 1)}
    tree = _tree(tmp_path, {"src/petrecords/values.py": "", "tests/unit/test_values.py": "", **importers})
    assert quick.plan(["src/petrecords/values.py"], tree).tests == ["tests/unit/test_values.py"]

    del importers[f"tests/api/test_{quick.WIDE}.py"]
    (tree / f"tests/api/test_{quick.WIDE}.py").unlink()
    assert len(quick.plan(["src/petrecords/values.py"], tree).tests) == quick.WIDE + 1


def test_a_bench_script_leads_to_the_tests_that_load_it(tree: Path) -> None:
    assert quick.plan(["bench/run.py"], tree).tests == ["tests/test_bench_run.py"]


def test_a_file_with_no_test_is_reported_as_untested(tree: Path) -> None:
    found = quick.plan(["src/petrecords/certificates/__init__.py", "deploy/haproxy.cfg"], tree)
    assert found.tests == []
    assert found.untested == ["src/petrecords/certificates/__init__.py", "deploy/haproxy.cfg"]


def test_the_tables_lead_shared_machinery_and_pages_to_tests_of_this_repository() -> None:
    migration = "src/petrecords/migrations/versions/2026_12_05_0021-b2d4f6a8c0e3_keep_a_clinics_record_of_a_dose.py"
    paths = ["src/petrecords/resources/access.py", "docs/explanation/architecture.md", "src/petrecords/config.py"]
    found = quick.plan([*paths, migration]).changed

    assert set(quick.API_WALK) <= set(found["src/petrecords/resources/access.py"])
    assert "tests/docs/test_site.py" in found["docs/explanation/architecture.md"]
    assert found["src/petrecords/config.py"] == [
        "tests/docs/test_contributing.py",
        "tests/docs/test_reference.py",
        "tests/unit/test_config.py",
    ]
    assert "tests/store/test_migrations.py" in found[migration]


def test_every_test_the_tables_name_exists() -> None:
    """A test file moved or renamed must be moved in the tables too, or the change it was for runs nothing."""
    named = {test for table in (quick.SHARED, quick.OTHER) for tests in table.values() for test in tests}
    assert [test for test in sorted(named) if not (ROOT / test).is_file()] == []


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout


def test_a_change_is_every_file_committed_staged_edited_or_new_since_the_branch_left_main(tmp_path: Path) -> None:
    _git(tmp_path, "init", "--quiet", "--initial-branch=main")
    _git(tmp_path, "config", "user.email", "dev@example.com")
    _git(tmp_path, "config", "user.name", "Dev")
    _tree(tmp_path, dict.fromkeys(("kept.py", "committed.py", "staged.py", "edited.py", ".gitignore"), "1\n"))
    (tmp_path / ".gitignore").write_text("ignored.py\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "--quiet", "-m", "start")
    _git(tmp_path, "checkout", "--quiet", "-b", "work")
    (tmp_path / "committed.py").write_text("2\n")
    _git(tmp_path, "commit", "--quiet", "-am", "work")
    _git(tmp_path, "checkout", "--quiet", "main")
    (tmp_path / "kept.py").write_text("main moved on\n")
    _git(tmp_path, "commit", "--quiet", "-am", "main")
    _git(tmp_path, "checkout", "--quiet", "work")
    (tmp_path / "staged.py").write_text("2\n")
    _git(tmp_path, "add", "staged.py")
    (tmp_path / "edited.py").write_text("2\n")
    _tree(tmp_path, {"new.py": "", "ignored.py": ""})

    # kept.py changed on main after the branch left it: not this change's.
    assert quick.changed_files(tmp_path) == ["committed.py", "edited.py", "new.py", "staged.py"]


def test_with_no_test_to_run_the_last_runs_failures_run_again_from_their_files(tmp_path: Path) -> None:
    cache = tmp_path / ".pytest_cache" / "v" / "cache"
    assert quick.last_failed(tmp_path) == []  # no run yet
    cache.mkdir(parents=True)
    _tree(tmp_path, {"tests/api/test_a.py": "", "tests/test_b.py": ""})
    failed = {"tests/api/test_a.py::test_one[sqlite]": True, "tests/api/test_a.py::T::two": True}
    failed |= {"tests/test_b.py::test_three": True, "tests/test_gone.py::test_four": True}
    (cache / "lastfailed").write_text(json.dumps(failed))

    files = quick.last_failed(tmp_path)

    assert files == ["tests/api/test_a.py", "tests/test_b.py"]  # a file since removed is none of them
    assert quick.run_command([], failed=files)[-3:] == ["--lf", "tests/api/test_a.py", "tests/test_b.py"]
    assert quick.run_command(["tests/test_x.py"], failed=files)[-2:] == ["--ff", "tests/test_x.py"]


def test_the_run_leaves_out_the_postgresql_variants_and_the_long_tests(tmp_path: Path) -> None:
    (tmp_path / "test_both.py").write_text(
        "import pytest\n\n"
        "@pytest.fixture(params=['sqlite', 'postgresql'])\n"
        "def database_url(request):\n"
        "    return request.param\n\n"
        "def test_on_each(database_url):\n"
        "    pass\n\n"
        "@pytest.mark.parametrize('server', ['postgresql'])\n"
        "def test_on_postgresql_alone(server):\n"
        "    pass\n\n"
        "@pytest.mark.long\n"
        "def test_long():\n"
        "    pass\n\n"
        "def test_plain():\n"
        "    pass\n"
    )
    command = quick.run_command([str(tmp_path / "test_both.py")])
    # Without the plugins that two plain tests do not use, whose imports take seconds of a process's start.
    unused = ["-p", "no:schemathesis", "-p", "no:faker", "-p", "no:hypothesispytest"]
    options = ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), *unused, "-v"]
    done = subprocess.run(
        [*command[:3], *options, *command[3:]], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_on_each[sqlite] PASSED" in done.stdout
    assert "test_plain PASSED" in done.stdout
    assert "2 passed, 3 deselected" in done.stdout, done.stdout
    assert command[0] == sys.executable
