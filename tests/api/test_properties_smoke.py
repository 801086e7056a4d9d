"""Names of every shape: the service either stores the trimmed name or answers 400, never anything else."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from litestar.testing import TestClient

from petrecords.text import WHITE_SPACE
from tests.support import auth, is_a_valid_name, pet_body


@given(name=st.text(max_size=120))
def test_any_name_is_stored_trimmed_or_rejected(sync_client: TestClient[Any], name: str) -> None:
    response = sync_client.post("/v1/pets", json=pet_body(name), headers=auth())

    trimmed = name.strip(WHITE_SPACE)
    valid = is_a_valid_name(trimmed)
    if valid:
        assert response.status_code == 201, response.text
        assert response.json()["name"] == trimmed
    else:
        assert response.status_code == 400, response.text
        assert response.json()["code"] == 994
        assert "name" in response.json()["errors"]
