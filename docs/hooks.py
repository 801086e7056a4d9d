"""MkDocs hooks: the reference pages' tables made from the code at build time, so that they cannot drift.

Between `<!-- generated: NAME -->` and `<!-- end generated -->` (a line for readers of the source in between):

- `<!-- generated: settings -->` becomes the table of every PETRECORDS_* setting, from the Settings class (its
  defaults, bounds and descriptions); a setting without a description fails the build.
- `<!-- generated: cli -->` becomes the help of every command, from the command line's own parser.
- `<!-- generated: errors -->` becomes the table of every failure the service answers, from its error classes.
- `reference/openapi.json` is the OpenAPI document the service serves, made by the service's own code.
- CHANGELOG.md is the page `changelog.md`; bench/README.md and its dated runs (bench/results) are pages of the
  site under `benchmarks/`.
- A "```sh serve" fence (a block that tests/docs runs as a server) is rendered as a plain "```sh" block.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import tempfile
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import annotated_types
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page
from pydantic import SecretStr
from pydantic.fields import FieldInfo

from petrecords.app import openapi_document
from petrecords.cli import parser
from petrecords.config import Settings
from petrecords.errors import ANSWERED

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
_MARKER = re.compile(r"^<!-- generated: ([a-z]+) -->$.*?^<!-- end generated -->$", re.MULTILINE | re.DOTALL)
_SERVE_FENCE = re.compile(r"^( *)```sh serve$", re.MULTILINE)
HELP_COLUMNS = "100"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    with tempfile.TemporaryDirectory() as data_dir:
        # A secret given, so that nothing is made in the data directory; the defaults otherwise.
        document = openapi_document(Settings(data_dir=Path(data_dir), auth_secret=SecretStr("x" * 32)))
    pretty = json.dumps(json.loads(document), indent=2, ensure_ascii=False).encode()
    files.append(File.generated(config, "reference/openapi.json", content=pretty))
    files.append(File.generated(config, "changelog.md", abs_src_path=str(ROOT / "CHANGELOG.md")))
    files.append(File.generated(config, "benchmarks/README.md", abs_src_path=str(BENCH / "README.md")))
    for result in sorted((BENCH / "results").glob("*.md")):
        dated = File.generated(config, f"benchmarks/results/{result.name}", abs_src_path=str(result))
        dated.inclusion = InclusionLevel.NOT_IN_NAV  # reached from the benchmarks page, not listed in the nav
        files.append(dated)
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    markdown = _SERVE_FENCE.sub(r"\1```sh", markdown)
    return _MARKER.sub(lambda found: _generated(found.group(1), page), markdown)


def _generated(what: str, page: Page) -> str:
    if what == "settings":
        return settings_table()
    if what == "cli":
        return commands_help()
    if what == "errors":
        return errors_table()
    raise PluginError(f"{page.file.src_uri}: nothing is generated as {what!r}")


def settings_table() -> str:
    rows = ["| Variable | Default | Values | Meaning |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        variable = f"PETRECORDS_{name.upper()}"
        if not field.description:
            raise PluginError(f"{variable} has no description in petrecords.config.Settings")
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
    wherever the site is built."""
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
