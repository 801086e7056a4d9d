"""MkDocs hooks: what the site has beside the pages in docs/.

- `reference/openapi.json` is the OpenAPI document the service serves, made by the service's own code. (The
  reference pages' tables are in their Markdown, written from the code by `make reference`: docs/reference.py.)
- CHANGELOG.md is the page `changelog.md`; bench/README.md and its dated runs (bench/results) are pages of the
  site under `benchmarks/`.
- A "```sh serve" fence (a block that tests/docs runs as a server) is rendered as a plain "```sh" block.
- A "```mermaid" fence is a diagram, which the theme draws: set here rather than in mkdocs.yml, whose YAML would
  need a Python tag to name the fence's format, and stays plain YAML that anything can read.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page
from pydantic import SecretStr
from pymdownx.superfences import fence_code_format

from petrecords.app import openapi_document
from petrecords.config import Settings

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
_SERVE_FENCE = re.compile(r"^( *)```sh serve$", re.MULTILINE)


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    fences = config.mdx_configs.setdefault("pymdownx.superfences", {})
    fences["custom_fences"] = [{"name": "mermaid", "class": "mermaid", "format": fence_code_format}]
    return config


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
    return _SERVE_FENCE.sub(r"\1```sh", markdown)
