"""Which changes a webhook selects: its `events`, each `{resource}.{action}` (`pets.created`,
`pet-vaccination.overdue`), `{resource}.*` (every action of a resource) or `*` (every change, the default)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from petrecords.resources.fields import Problem

ACTIONS = ("created", "replaced", "deleted", "due-soon", "overdue")
"""What a change records: a write, or a reminder (contract, sections 11 and 15)."""
EVERY_EVENT = "*"
DEFAULT_EVENTS = (EVERY_EVENT,)
_SHOWN_AT_MOST = 3
"""Values a message quotes; a long list of wrong ones is cut there."""


def event_names(resources: Collection[str]) -> frozenset[str]:
    """Every value `events` may hold, for the resources named."""
    return frozenset(
        [EVERY_EVENT]
        + [f"{resource}.*" for resource in resources]
        + [f"{resource}.{action}" for resource in resources for action in ACTIONS]
    )


def read_events(value: Any, resources: Collection[str]) -> tuple[tuple[str, ...] | None, Problem | None]:
    """(the events, None) when `value` is a valid `events` for the resources named, else (None, what was
    expected)."""
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        return None, "must be an array of strings."
    if not value:
        return None, f"must name at least one event ({EVERY_EVENT!r} for every change)."
    known = event_names(resources)
    unknown = [item for item in value if item not in known]
    if unknown:
        quoted = ", ".join(repr(item[:60]) for item in unknown[:_SHOWN_AT_MOST])
        more = f" and {len(unknown) - _SHOWN_AT_MOST} more" if len(unknown) > _SHOWN_AT_MOST else ""
        verb = "is" if len(unknown) == 1 else "are"
        return None, (
            f"must hold '*', '{{resource}}.*' or '{{resource}}.{{action}}', a resource being one of "
            f"{', '.join(resources)} and an action one of {', '.join(ACTIONS)}; {quoted}{more} {verb} not."
        )
    return tuple(value), None


class EventSelection:
    """The changes a webhook's `events` select."""

    def __init__(self, events: Iterable[str]) -> None:
        self._events = frozenset(events)

    def selects(self, resource: str, action: str) -> bool:
        return EVERY_EVENT in self._events or f"{resource}.*" in self._events or f"{resource}.{action}" in self._events
