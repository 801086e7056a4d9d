"""The reference pages' generated parts, written into the Markdown from the code: `make reference`.

Between `<!-- generated: NAME -->` and `<!-- end generated -->` in docs/reference/*.md:

- `settings`: the table of every PETRECORDS_* setting, from the Settings class (its defaults, bounds and
  descriptions); a setting without a description is refused.
- `cli`: the help of every command, from the command line's own parser.
- `errors`: the table of every failure the service answers, from its error classes.

The pages are committed as written, so that they read the same on a code host as on the site; a test
(tests/docs/test_reference.py) fails when one differs from what the code makes. `--check` writes nothing and
names the pages that differ.

So is src/petrecords/client_resources.json, written whole: each registered resource as the client commands
(`petrecords <resource> <action>`) show it, which they read instead of importing the declarations.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

import annotated_types
from pydantic import SecretStr
from pydantic.fields import FieldInfo

from petrecords.cli import parser
from petrecords.client import RESOURCES_FILE, ClientResource, client_resources_json
from petrecords.config import Settings
from petrecords.errors import ANSWERED
from petrecords.registry import RESOURCES

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "docs" / "reference"
COMMAND = "make reference"
"""What brings the pages in step with the code."""
_MARKER = re.compile(r"^(<!-- generated: ([a-z]+) -->\n).*?^(<!-- end generated -->)$", re.MULTILINE | re.DOTALL)
HELP_COLUMNS = "100"


class ReferenceError(Exception):
    """A page or a piece of the code that the reference cannot be made from, said in one line."""


def settings_table() -> str:
    rows = ["| Variable | Default | Values | Meaning |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        variable = f"PETRECORDS_{name.upper()}"
        if not field.description:
            raise ReferenceError(f"{variable} has no description in petrecords.config.Settings")
        rows.append(f"| `{variable}` | {_default(field)} | {_values(field)} | {_cell(field.description)} |")
    return "\n".join(rows)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        # Worked out where the service runs: its factory's first line says how.
        return (field.default_factory.__doc__ or "").splitlines()[0].rstrip(".")
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Path):
        return f"`./{value}`"
    if isinstance(value, tuple):
        return f"`{','.join(value)}`" if value else "unset"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


def _values(field: FieldInfo) -> str:
    annotation = field.annotation
    if typing.get_origin(annotation) is typing.Literal:
        return ", ".join(f"`{choice}`" for choice in typing.get_args(annotation))
    arguments = [argument for argument in typing.get_args(annotation) if argument is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(arguments) == 1:
        annotation = arguments[0]
    kind = {
        bool: "`true` or `false`",
        int: "a whole number",
        float: "a number",
        str: "text",
        Path: "a directory",
        SecretStr: "text, kept secret",
    }.get(annotation, "a comma-separated list" if typing.get_origin(annotation) is tuple else "text")
    bounds = []
    for rule in field.metadata:
        if isinstance(rule, annotated_types.Ge):
            bounds.append(f"≥ {rule.ge:,}")
        elif isinstance(rule, annotated_types.Gt):
            bounds.append(f"> {rule.gt:,}")
        elif isinstance(rule, annotated_types.Le):
            bounds.append(f"≤ {rule.le:,}")
        elif getattr(rule, "pattern", None):
            bounds.append(f"matching `{rule.pattern}`")
    return _cell(", ".join([kind, *bounds]))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def commands_help() -> str:
    root = parser()
    sections = [_help_block(root)]
    for name, command in _subcommands(root).items():
        sections.append(f"### petrecords {name}\n\n{_help_block(command)}")
        for action_name, action in _subcommands(command).items():
            sections.append(f"#### petrecords {name} {action_name}\n\n{_help_block(action)}")
    return "\n\n".join(sections)


def _subcommands(command: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_block(command: argparse.ArgumentParser) -> str:
    with _plain_help(HELP_COLUMNS):
        text = command.format_help()
    return f"```text\n{text.rstrip()}\n```"


@contextlib.contextmanager
def _plain_help(columns: str) -> Iterator[None]:
    """argparse wraps its help to $COLUMNS, and colours it on a terminal from Python 3.14: the same plain text
    wherever the pages are made."""
    wanted = {"COLUMNS": columns, "NO_COLOR": "1", "PYTHON_COLORS": "0"}
    before = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def errors_table() -> str:
    rows = ["| HTTP | `code` | When |", "|---|---|---|"]
    for error in sorted(ANSWERED, key=lambda error: (error.status, -error.code)):
        rows.append(f"| {error.status} | {error.code} | {_cell(error.meaning)} |")
    return "\n".join(rows)


GENERATORS: dict[str, Callable[[], str]] = {"settings": settings_table, "cli": commands_help, "errors": errors_table}


def generated(page: Path) -> str:
    """The page as the code makes it: each generated part written anew, the rest as it is."""
    text = page.read_text()
    made: dict[str, str] = {}

    def part(found: re.Match[str]) -> str:
        start, name, end = found.groups()
        if name not in GENERATORS:
            raise ReferenceError(f"{_shown(page)}: nothing is generated as {name!r}")
        if name not in made:
            made[name] = GENERATORS[name]()
        return f"{start}{made[name]}\n{end}"

    return _MARKER.sub(part, text)


def client_resources() -> str:
    return client_resources_json(
        [ClientResource(r.command, r.title, r.path, r.description) for r in RESOURCES.resources]
    )


def made(page: Path) -> str:
    """The file as the code makes it."""
    return client_resources() if page == RESOURCES_FILE else generated(page)


def _shown(page: Path) -> str:
    return os.path.relpath(page, ROOT)


def pages() -> list[Path]:
    return sorted(PAGES.glob("*.md"))


def stale_pages() -> list[Path]:
    """The pages whose generated parts differ from what the code makes, and the client commands' resources file
    when it does."""
    return [page for page in [*pages(), RESOURCES_FILE] if made(page) != page.read_text(encoding="utf-8")]


def main(arguments: list[str]) -> int:
    options = argparse.ArgumentParser(description="Write the reference pages' generated parts from the code.")
    options.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs")
    checking = options.parse_args(arguments).check
    try:
        stale = stale_pages()
        if checking:
            for page in stale:
                sys.stderr.write(f"{_shown(page)} differs from what the code makes: run `{COMMAND}`\n")
            return 1 if stale else 0
        for page in stale:
            page.write_text(made(page), encoding="utf-8")
            sys.stdout.write(f"wrote {_shown(page)}\n")
    except ReferenceError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
