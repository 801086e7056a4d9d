"""Which changes a webhook selects (webhooks.events): the values `events` may hold, what else is refused, and
the selection a change is checked against."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from petrecords.registry import RESOURCES
from petrecords.webhooks.events import ACTIONS, DEFAULT_EVENTS, EventSelection, event_names, read_events

NAMES = tuple(resource.name for resource in RESOURCES.resources)
"""The registered resources' names."""


class TestReading:
    @pytest.mark.parametrize(
        "events",
        [
            ["*"],
            ["pets.created"],
            ["pet-vaccination.due-soon", "pet-vaccination.overdue"],
            ["pets.*", "vaccines.deleted", "pet-shares.replaced"],
            ["pets.created", "pets.created"],
        ],
    )
    def test_valid_events_are_read_as_they_are(self, events: list[str]) -> None:
        assert read_events(events, NAMES) == (tuple(events), None)

    def test_the_default_selects_every_change(self) -> None:
        assert DEFAULT_EVENTS == ("*",)
        assert read_events(list(DEFAULT_EVENTS), NAMES) == (DEFAULT_EVENTS, None)

    def test_every_resource_and_action_may_be_named(self) -> None:
        assert set(ACTIONS) == {"created", "replaced", "deleted", "due-soon", "overdue"}
        for resource in NAMES:
            for action in ACTIONS:
                assert read_events([f"{resource}.{action}"], NAMES)[1] is None

    @pytest.mark.parametrize(
        "events",
        [
            ["pets.creatd"],
            ["pet.created"],
            ["Pets.created"],
            ["pets.Created"],
            ["pets"],
            ["pets."],
            ["*.created"],
            ["**"],
            ["pets.*.created"],
            [" pets.created"],
            [""],
            ["*", "owners.created"],
        ],
    )
    def test_anything_else_is_refused_naming_what_may_be(self, events: list[str]) -> None:
        value, problem = read_events(events, NAMES)
        assert value is None
        assert problem is not None
        assert problem.startswith("must hold '*', '{resource}.*' or '{resource}.{action}', a resource being one of ")
        assert "pets, vaccines, pet-vaccination, pet-shares" in problem
        assert "created, replaced, deleted, due-soon, overdue" in problem

    def test_the_refusal_quotes_what_was_wrong(self) -> None:
        _, problem = read_events(["*", "pets.creatd"], NAMES)
        assert problem is not None
        assert problem.endswith("; 'pets.creatd' is not.")
        _, problem = read_events(["a", "b", "c", "d", "e"], NAMES)
        assert problem is not None
        assert problem.endswith("; 'a', 'b', 'c' and 2 more are not.")

    @pytest.mark.parametrize(
        ("value", "problem"),
        [
            ([], "must name at least one event ('*' for every change)."),
            ("*", "must be an array of strings."),
            ([1], "must be an array of strings."),
            (None, "must be an array of strings."),
            ({"pets": "*"}, "must be an array of strings."),
        ],
    )
    def test_a_value_that_is_no_list_of_names_is_refused(self, value: Any, problem: str) -> None:
        assert read_events(value, NAMES) == (None, problem)

    def test_a_resource_registered_later_is_known_by_its_name(self) -> None:
        assert read_events(["pet-notes.replaced"], NAMES)[1] is not None
        assert read_events(["pet-notes.replaced"], (*NAMES, "pet-notes")) == (("pet-notes.replaced",), None)


resources = st.sampled_from(NAMES)
actions = st.sampled_from(ACTIONS)


class TestSelection:
    def test_each_form_selects_what_it_names(self) -> None:
        selection = EventSelection(["pets.created", "pet-vaccination.*"])
        assert selection.selects("pets", "created")
        assert not selection.selects("pets", "replaced")
        assert not selection.selects("vaccines", "created")
        for action in ACTIONS:
            assert selection.selects("pet-vaccination", action)

    @given(resource=resources, action=actions)
    def test_every_change_is_selected_by_the_star(self, resource: str, action: str) -> None:
        assert EventSelection(["*"]).selects(resource, action)

    @given(events=st.lists(st.sampled_from(sorted(event_names(NAMES))), min_size=1), resource=resources, action=actions)
    def test_a_change_is_selected_when_one_of_the_events_names_it(
        self, events: list[str], resource: str, action: str
    ) -> None:
        names_it = {"*", f"{resource}.*", f"{resource}.{action}"}
        assert EventSelection(events).selects(resource, action) == bool(names_it & set(events))
