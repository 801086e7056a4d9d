"""The documentation a newcomer reads: a short README that leads to every task, a short bench/README.md, the site
built strictly (a broken link or anchor fails), its reference made from the code, and a changelog of every
release."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from petrecords.cli import parser
from petrecords.config import Settings
from petrecords.errors import ANSWERED

ROOT = Path(__file__).resolve().parents[2]
README_LIMIT = 12 * 1024
BENCH_README_LIMIT = 18 * 1024
"""16 KiB, and room for each new feature's few lines (a bench of its own links to its dated runs)."""
HOW_TO = {
    "how-to/install.md": "install for production",
    "how-to/deploy.md": "deploy with PgBouncer, replicas and HAProxy",
    "how-to/backup-and-restore.md": "back up and restore",
    "how-to/moving-in.md": "move in from Whoof or JSON Lines",
    "how-to/moving-to-postgresql.md": "move to PostgreSQL",
    "how-to/share-with-a-clinic.md": "share with a clinic",
    "how-to/browser-application.md": "a browser application",
    "how-to/upgrading.md": "upgrade",
}
FROM_DIST = re.compile(r"-r \"?\$?\S*dist\S*/requirements\.txt|dist\S*/petrecords-\*\.whl")
"""What a `pip install` of the service installs: the pins and the wheel of `make dist`."""
README_LEADS_TO = ("backup-and-restore.md", "moving-in.md", "share-with-a-clinic.md", "deploy.md")
"""What a newcomer must find from the README alone: how to back up, import, share and deploy."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir", str(built)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return built


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def _nav_pages() -> list[str]:
    def walk(entries: list[object]) -> list[str]:
        found = []
        for entry in entries:
            if isinstance(entry, str):
                found.append(entry)
            elif isinstance(entry, dict):
                for value in entry.values():
                    found.extend(walk(value) if isinstance(value, list) else [value])
        return found

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    return walk(config["nav"])


def test_the_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_bytes()) <= README_LIMIT


def test_the_bench_readme_is_short() -> None:
    assert len((ROOT / "bench" / "README.md").read_bytes()) <= BENCH_README_LIMIT


def test_dated_benchmark_runs_are_dated_files() -> None:
    runs = sorted((ROOT / "bench" / "results").glob("*.md"))
    assert runs
    for run in runs:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md", run.name), run.name


def test_the_readme_leads_to_backup_import_share_and_deploy() -> None:
    links = re.findall(r"\]\(([^)#\s]+)", (ROOT / "README.md").read_text())
    for page in README_LEADS_TO:
        found = [link for link in links if link.endswith(f"/{page}")]
        assert found, f"README.md does not link to {page}"
        assert all((ROOT / link).is_file() for link in found), found


def test_the_site_is_organised_by_what_the_reader_wants() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["strict"] is True
    assert config["theme"]["name"] == "material"
    sections = [next(iter(entry)) for entry in config["nav"] if isinstance(entry, dict)]
    for section in ("Tutorial", "How-to guides", "Reference", "Explanation"):
        assert section in sections
    pages = _nav_pages()
    for page in HOW_TO:
        assert page in pages, f"no how-to guide to {HOW_TO[page]}"
    for page in ("reference/configuration.md", "reference/http-api.md", "reference/cli.md", "reference/errors.md"):
        assert page in pages


def test_no_page_installs_the_service_from_an_index() -> None:
    """No index has the service: pip installs it from the wheel `make dist` builds, with the pins beside it."""
    pages = [ROOT / "README.md", ROOT / "Dockerfile", *(ROOT / "docs").rglob("*.md")]
    for page in pages:
        for line in page.read_text().splitlines():
            if re.search(r"\bpip install\b", line):
                assert FROM_DIST.search(line), (page, line)


def test_every_setting_is_on_the_configuration_page(site: Path) -> None:
    page = _text(site / "reference" / "configuration" / "index.html")
    for name, field in Settings.model_fields.items():
        variable = f"PETRECORDS_{name.upper()}"
        assert variable in page
        assert field.description
        assert html.unescape(field.description) in page, f"{variable}'s description is not on the page"


def test_every_command_is_on_the_command_line_page(site: Path) -> None:
    page = _text(site / "reference" / "cli" / "index.html")
    commands = next(action for action in parser()._actions if action.dest == "command")
    assert commands.choices
    for name in commands.choices:
        assert f"usage: petrecords {name}" in page, name


def test_every_error_is_on_the_errors_page(site: Path) -> None:
    page = _text(site / "reference" / "errors" / "index.html")
    for error in ANSWERED:
        assert re.search(rf"\b{error.status}\s+{error.code}\b", page), (error.status, error.code)


def test_the_served_document_is_on_the_site(site: Path) -> None:
    assert (site / "reference" / "openapi.json").read_text().lstrip().startswith("{")


def test_the_changelog_runs_from_the_first_release_to_this_one() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", text, re.MULTILINE)
    versions = [version for version, _ in releases]
    current = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert versions[0] == current
    assert versions[-1] == "1.0.0"
    assert versions == sorted(versions, key=lambda version: tuple(map(int, version.split("."))), reverse=True)
    dates = [date for _, date in releases]
    assert dates == sorted(dates, reverse=True)
    for version in versions:
        major = version.split(".")[0]
        assert f"API contract v{major}" in text, f"{version} does not say its contract version"
