"""The map a newcomer reads (CONTRIBUTING.md) names every module of the service, in its package, and the pages that
walk the code name only files and functions that exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "petrecords"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
ARCHITECTURE = ROOT / "docs" / "explanation" / "architecture.md"
_HEADING = re.compile(r"^`src/petrecords/(?:([a-z_]+(?:/[a-z_]+)*)/)?`", re.MULTILINE)
_ENTRY = re.compile(r"^- `([a-z_]+\.py)`: \S", re.MULTILINE)


def _modules() -> set[str]:
    """Every module of the service, as a path under src/petrecords/, but packages' __init__ and migrations."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if path.name != "__init__.py" and relative.parts[0] != "migrations":
            found.add(relative.as_posix())
    return found


def _mapped() -> set[str]:
    """The modules CONTRIBUTING.md gives a line, each under the heading of its package."""
    text = CONTRIBUTING.read_text()
    headings = list(_HEADING.finditer(text))
    assert headings, "CONTRIBUTING.md has no `src/petrecords/` heading"
    mapped = set()
    for number, heading in enumerate(headings):
        end = headings[number + 1].start() if number + 1 < len(headings) else len(text)
        package = f"{heading.group(1)}/" if heading.group(1) else ""
        mapped.update(package + entry for entry in _ENTRY.findall(text, heading.end(), end))
    return mapped


def test_every_module_has_its_line_in_the_map() -> None:
    assert sorted(_modules() - _mapped()) == [], "modules to add to CONTRIBUTING.md's map, under their package"
    assert sorted(_mapped() - _modules()) == [], "lines of CONTRIBUTING.md's map for modules that do not exist"


def test_every_file_the_map_and_the_walk_name_exists() -> None:
    for page in (CONTRIBUTING, ARCHITECTURE):
        for named in re.findall(r"`((?:src|tests|docs|bench)/[\w/.-]+|[\w/]+\.py)`", page.read_text()):
            # From the repository's root or the package's; a bare file name is some module's or test helper's (a line
            # of the map, under its package's heading; a file of tests/).
            if "/" in named:
                found = (ROOT / named).exists() or (PACKAGE / named).exists()
            else:
                found = any(PACKAGE.rglob(named)) or any((ROOT / "tests").rglob(named))
            assert found, f"{page.name} names {named}, which does not exist"


def _defined() -> set[str]:
    """Every module, class, function, method and assigned name (an enum's member) of the service."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        names.add(path.stem)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def test_every_function_the_walk_names_exists() -> None:
    """`module.function`, `Class.method` and `function(…)` in the walks' prose and sequences: each is defined."""
    text = ARCHITECTURE.read_text()
    named = set(re.findall(r"\b(?:[a-z_]+|[A-Z][A-Za-z]+)\.([a-z_]+|[A-Z][A-Za-z]+)\b(?!\.py|/)", text))
    named.update(re.findall(r"\b([A-Za-z_][A-Za-z_0-9]*)\(", text))
    named -= {"py", "md", "com", "example"}
    defined = _defined()
    assert sorted(name for name in named if name not in defined) == []
