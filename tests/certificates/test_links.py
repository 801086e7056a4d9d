"""Certificate links (petrecords.certificates.links): tokens of 256 random bits, kept as a hash, compared in constant
time, and never in the access log, whatever the path's letter case or slashes."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from litestar.testing import AsyncTestClient

from petrecords.certificates.links import (
    PUBLIC_PREFIX,
    digest_of,
    link_of,
    matches,
    new_token,
    redact_path,
    well_formed,
)
from petrecords.config import Settings
from petrecords.logs import JsonFormatter


class TestTokens:
    def test_256_random_bits_url_safe(self) -> None:
        tokens = {new_token() for _ in range(1000)}
        assert len(tokens) == 1000
        assert all(well_formed(token) and len(token) == 43 for token in tokens)
        assert link_of("x" * 43) == "/public/certificates/" + "x" * 43

    def test_kept_as_a_hash_that_reveals_nothing_of_it(self) -> None:
        token = new_token()
        digest = digest_of(token)
        assert len(digest) == 64
        assert token not in digest
        assert matches(digest_of(token), digest)
        assert not matches(digest_of(new_token()), digest)
        assert not matches(digest_of(token[:-1] + ("A" if token[-1] != "A" else "B")), digest)

    @pytest.mark.parametrize("text", ["", "short", "x" * 42, "x" * 44, "a" * 42 + "=", "a" * 42 + "/", "ä" * 43])
    def test_anything_else_is_not_well_formed(self, text: str) -> None:
        assert not well_formed(text)


class TestRedaction:
    @pytest.mark.parametrize(
        "path",
        [
            "/public/certificates/TOKEN",
            "/PUBLIC/Certificates/TOKEN",
            "//public//certificates/TOKEN",
            "/public/certificates/TOKEN/extra",
        ],
    )
    def test_the_token_never_shows(self, path: str) -> None:
        assert "TOKEN" not in redact_path(path)
        assert redact_path(path).lower().endswith("/certificates/…")

    @pytest.mark.parametrize("path", ["/v1/pets", "/v1/pet-certificates/019a", "/certificates/x", "/healthz"])
    def test_other_paths_as_they_are(self, path: str) -> None:
        assert redact_path(path) == path

    @given(st.text(alphabet="/abcCERTIFICATESpublic-_", max_size=60))
    def test_a_redacted_path_never_holds_what_followed_the_prefix(self, path: str) -> None:
        lowered = path.lower()
        if (start := lowered.find(PUBLIC_PREFIX)) >= 0:
            assert redact_path(path) == path[: start + len(PUBLIC_PREFIX)] + "…"


class TestAccessLog:
    async def test_a_link_requested_leaves_no_token_in_the_log(
        self,
        make_client: Callable[[Settings], AsyncTestClient[Any]],
        make_settings: Callable[..., Settings],
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        caplog.set_level(logging.INFO)
        token = new_token()
        async with make_client(make_settings(access_log=True)) as client:
            for path in (link_of(token), f"/PUBLIC/certificates/{token}", f"/public//certificates/{token}"):
                await client.get(path)
        formatter = JsonFormatter()
        # The service's lines: the test's own HTTP client logs the URLs it asked for.
        records = [record for record in caplog.records if record.name != "httpx"]
        lines = [json.loads(formatter.format(record)) for record in records]
        access = [line for line in lines if line["logger"] == "petrecords.access"]
        assert len(access) == 3
        assert all(line["path"].endswith("/certificates/…") for line in access)
        assert token not in "\n".join(formatter.format(record) for record in records)
