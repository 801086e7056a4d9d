"""Fixtures that API tests of several files share: each registered resource in turn, with a maker of records of
it from its example (for the rules every resource follows alike); Alice's dog Rex, and a one-year rabies vaccine
of the Rabies group. A file that needs its own Rex or rabies vaccine (another type, a microchip) declares its own,
which pytest takes before these. Fixtures live here rather than in tests/support.py: one imported by name is
shadowed by the test's argument of the same name."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from petrecords.registry import RESOURCES
from petrecords.resources.declaration import Resource
from tests.support import ALICE, Examples, create, create_vaccine

Client = AsyncTestClient[Any]


@pytest.fixture
async def rex(client: Client) -> dict[str, Any]:
    pet: dict[str, Any] = (await create(client, ALICE, name="Rex")).json()
    return pet


@pytest.fixture
async def rabies(client: Client) -> dict[str, Any]:
    vaccine: dict[str, Any] = (await create_vaccine(client, name="Rabies 1-year", group="Rabies")).json()
    return vaccine


@pytest.fixture(params=RESOURCES.resources, ids=lambda resource: resource.name)
def resource(request: pytest.FixtureRequest) -> Resource:
    """Each registered resource in turn, for a rule that is the same for all."""
    chosen: Resource = request.param
    return chosen


@pytest.fixture
def examples(client: Client) -> Examples:
    return Examples(client)
