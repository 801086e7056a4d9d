"""The certificate as a web page (petrecords.certificates.page): every value escaped, and a Content-Security-Policy
that allows its one style element and nothing else. (In a browser: tests/e2e/test_certificate_page.py.)"""

from __future__ import annotations

import base64
import hashlib
import html.parser
import re

from hypothesis import given
from hypothesis import strategies as st

from petrecords.certificates.page import CONTENT_SECURITY_POLICY, STYLE, render_page
from tests.certificates.support import NOW_MS, dose_row, facts_of, many_doses, pet_row, vaccine_row


class _Elements(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[str] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes.extend(name for name, _ in attrs)
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


def _elements(page: str) -> _Elements:
    parsed = _Elements()
    parsed.feed(page)
    return parsed


class TestPolicy:
    def test_nothing_but_the_style_element_is_allowed(self) -> None:
        directives = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
        assert directives["default-src"] == "'none'"
        assert (
            directives["style-src"] == f"'sha256-{base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()}'"
        )
        assert directives["frame-ancestors"] == directives["base-uri"] == directives["form-action"] == "'none'"
        assert "unsafe" not in CONTENT_SECURITY_POLICY

    def test_the_page_has_that_style_element_and_no_script_or_other_resource(self) -> None:
        page = render_page(facts_of(doses=many_doses(5)))
        parsed = _elements(page)
        assert parsed.styles == [STYLE]
        assert not {"script", "img", "link", "iframe", "object", "form", "base"} & set(parsed.tags)
        assert not {"style", "src", "href", "srcset"} & set(parsed.attributes)
        assert not [name for name in parsed.attributes if name.startswith("on")]


class TestValues:
    def test_markup_in_any_value_is_text(self) -> None:
        hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&"
        vaccine = vaccine_row(hostile, hostile, manufacturer=hostile)
        dose = dose_row(NOW_MS - 1000, clinic=hostile, veterinarian=hostile, lot_number=hostile)
        page = render_page(facts_of(pet_row(name=hostile, breed=hostile, color=hostile), [(dose, vaccine)]))
        parsed = _elements(page)
        assert "script" not in parsed.tags
        assert "img" not in parsed.tags
        assert "onerror" not in parsed.attributes
        assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 8

    @given(st.text(max_size=40))
    def test_any_name_shows_as_itself(self, name: str) -> None:
        page = render_page(facts_of(pet_row(name=name), doses=[]))
        found = re.search(r'<p class="name" dir="auto">(.*?)</p>', page, re.S)
        assert found is not None
        assert html.unescape(found.group(1)) == name
