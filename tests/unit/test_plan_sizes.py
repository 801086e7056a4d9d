"""The kept sizes a store's lists choose their plans by (store/grants.py, PlanSizes): for a moment, and a bounded
number of them."""

from __future__ import annotations

from petrecords.store.grants import PlanSizes


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


KEY = ("pet-vaccination", "vet@clinic.example", ("group:clinic-42",))


def test_sizes_serve_for_their_moment_and_no_longer() -> None:
    clock = Clock()
    sizes = PlanSizes(seconds=1.0, clock=clock)
    assert sizes.get(KEY) is None
    sizes.put(KEY, {"shared group:clinic-42": 5})
    clock.now += 1.0
    assert sizes.get(KEY) == {"shared group:clinic-42": 5}
    clock.now += 0.001
    assert sizes.get(KEY) is None


def test_a_new_read_replaces_the_old_and_starts_its_moment_again() -> None:
    clock = Clock()
    sizes = PlanSizes(seconds=1.0, clock=clock)
    sizes.put(KEY, {"": 1})
    clock.now += 0.9
    sizes.put(KEY, {"": 2})
    clock.now += 0.9
    assert sizes.get(KEY) == {"": 2}


def test_the_oldest_read_goes_first_beyond_the_bound() -> None:
    sizes = PlanSizes(most=3, clock=Clock())
    keys = [("pets", None, (f"user{number}@example.com",)) for number in range(4)]
    for number, key in enumerate(keys):
        sizes.put(key, {"": number})
    assert [sizes.get(key) for key in keys] == [None, {"": 1}, {"": 2}, {"": 3}]
