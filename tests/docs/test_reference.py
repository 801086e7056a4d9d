"""The reference pages are committed as Markdown, their tables of settings, commands and errors written from the
code by `make reference` (docs/reference.py): a page that differs from what the code makes fails here, naming the
command that brings it in step."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.support import module_from_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    """docs/reference.py, loaded from its file: docs/ is no package."""
    module: ModuleType = module_from_file(ROOT / "docs" / "reference.py", "docs_reference")
    return module


def test_every_committed_page_is_what_the_code_makes(reference: ModuleType) -> None:
    stale = [str(page.relative_to(ROOT)) for page in reference.stale_pages()]
    assert not stale, f"{', '.join(stale)} differ from what the code makes: run `make reference` and commit them"


def test_the_generated_parts_are_in_the_pages(reference: ModuleType) -> None:
    text = {page.name: page.read_text() for page in reference.pages()}
    assert "| `PETRECORDS_DATABASE_URL` |" in text["configuration.md"]
    assert "usage: petrecords serve" in text["cli.md"]
    assert "| 404 | 995 |" in text["errors.md"]
    assert not any("made when the site is built" in page for page in text.values())


def test_a_changed_setting_is_found_and_rewritten(
    reference: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    committed = ROOT / "docs" / "reference" / "configuration.md"
    page = tmp_path / "configuration.md"
    page.write_text(committed.read_text().replace("PETRECORDS_DB_POOL_SIZE", "PETRECORDS_DB_POOL_SIZES", 1))
    monkeypatch.setattr(reference, "ROOT", tmp_path)
    monkeypatch.setattr(reference, "PAGES", tmp_path)
    assert reference.stale_pages() == [page]
    assert reference.main(["--check"]) == 1
    assert page.read_text() != committed.read_text()
    assert reference.main([]) == 0
    assert page.read_text() == committed.read_text()
    assert reference.stale_pages() == []


def test_a_marker_nothing_makes_is_refused(reference: ModuleType, tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- generated: settngs -->\n<!-- end generated -->\n")
    with pytest.raises(reference.ReferenceError, match="nothing is generated as 'settngs'"):
        reference.generated(page)
