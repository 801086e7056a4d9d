"""A certificate as a web page that a phone shows well: one document, its style inline, no script, nothing loaded
from anywhere, and the Content-Security-Policy that holds it to that.

The style sheet is fixed, so its SHA-256 is fixed too: the policy allows that one style element and nothing else
(`default-src 'none'`: no script, image, font, frame or connection; no form, base or framing either). Every value
is escaped; a name that holds markup shows as text, and would run nowhere if it did not.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape

from petrecords.certificates.facts import CertificateFacts
from petrecords.certificates.labels import (
    DOSE_COLUMNS,
    TITLE,
    VERIFY_NOTE,
    dose_facts,
    dose_reference,
    pet_facts,
    validity,
)

STYLE = """
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%;text-size-adjust:100%}
body{margin:0;font:16px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif;color:#1b1f24;
background:#f3f4f6}
main{max-width:48rem;margin:0 auto;padding:1rem}
h1{font-size:1.35rem;margin:0 0 .25rem}
h2{font-size:1.2rem;margin:1.25rem 0 .5rem}
h3{font-size:1.05rem;margin:0 0 .5rem;display:flex;flex-wrap:wrap;gap:.25rem .5rem;align-items:baseline}
section,article{background:#fff;border:1px solid #d0d7de;border-radius:.5rem;padding:.75rem 1rem;margin:0 0 .75rem}
dl{display:grid;grid-template-columns:minmax(6.5rem,max-content) minmax(0,1fr);gap:.2rem .75rem;margin:0}
dt{color:#57606a}
dd{margin:0;overflow-wrap:anywhere;min-width:0}
.name{font-size:1.5rem;margin:0 0 .5rem;overflow-wrap:anywhere}
.state{font-size:.8rem;font-weight:600;padding:.05rem .5rem;border-radius:1rem;background:#ddf4ff;color:#0a3069;
white-space:nowrap}
.state-overdue .state{background:#ffebe9;color:#82071e}
.state-due-soon .state{background:#fff8c5;color:#4d2d00}
.state-superseded .state,.state-deceased .state{background:#eaeef2;color:#424a53}
.state-superseded{opacity:.8}
.reference{margin:.5rem 0 0;font-size:.8rem;color:#57606a;overflow-wrap:anywhere}
footer{font-size:.85rem;color:#57606a;margin:1rem 0 2rem}
@media print{body{background:#fff}section,article{break-inside:avoid}}
""".strip()

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; "
    f"style-src 'sha256-{base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()}'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The Content-Security-Policy that every answer of the page carries."""


def render_page(facts: CertificateFacts) -> str:
    """The page of a certificate: UTF-8 HTML, every value escaped."""
    pet = facts.pet
    parts = [
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>{TITLE}: {_text(pet.name)}</title>",
        f"<style>{STYLE}</style></head>\n<body><main>",
        f"<header><h1>{TITLE}</h1>{_definitions(validity(facts))}</header>",
        f'<section class="pet"><p class="name" dir="auto">{_text(pet.name)}</p>',
        f"{_definitions(pet_facts(pet))}</section>",
        f"<h2>Vaccinations ({len(facts.vaccinations)})</h2>",
    ]
    for dose in facts.vaccinations:
        values = dose_facts(dose)
        product, state = values[0], values[-1]
        parts.append(
            f'<article class="dose state-{dose.state}"><h3><span dir="auto">{_text(product)}</span>'
            f'<span class="state">{_text(state)}</span></h3>'
            f"{_definitions(list(zip(DOSE_COLUMNS[1:-1], values[1:-1], strict=True)))}"
            f'<p class="reference" dir="auto">{_text(dose_reference(dose))}</p></article>'
        )
    if not facts.vaccinations:
        parts.append("<section><p>No vaccination of the certified groups is recorded.</p></section>")
    parts.append(f"<footer>{_text(VERIFY_NOTE)}</footer></main></body></html>\n")
    return "".join(parts)


def _definitions(pairs: list[tuple[str, str]]) -> str:
    items = "".join(f'<dt>{_text(label)}</dt><dd dir="auto">{_text(value)}</dd>' for label, value in pairs)
    return f"<dl>{items}</dl>"


def _text(value: str) -> str:
    return escape(value, quote=True)
