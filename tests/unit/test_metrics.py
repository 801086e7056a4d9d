"""The metrics' own rules (petrecords.metrics): the latency histogram that /metrics shows is made from requests
tallied in the process, in Prometheus's form, whatever the order of flushes."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from petrecords.metrics import Metrics

LATENCY = "petrecords_http_request_duration_seconds"


def _families(metrics: Metrics) -> dict[str, tuple[str, list[tuple[str, dict[str, str], float]]]]:
    return {
        family.name: (family.type, [(sample.name, sample.labels, sample.value) for sample in family.samples])
        for family in text_string_to_metric_families(metrics.render().decode())
    }


async def test_the_latency_histogram_counts_each_request_in_its_bucket() -> None:
    metrics = Metrics()
    for seconds in (0.0001, 0.0005, 0.0007, 0.3):
        metrics.observe(method="GET", route="/v1/pets/{id}", status=200, seconds=seconds)
    metrics.flush()
    for seconds in (0.0005, 30.0):
        metrics.observe(method="GET", route="/v1/pets/{id}", status=200, seconds=seconds)
    metrics.observe(method="POST", route="/v1/pets", status=201, seconds=0.002)

    families = _families(metrics)  # flushes what is tallied

    kind, samples = families[LATENCY]
    assert kind == "histogram"
    got = {(name, labels.get("method"), labels.get("le")): value for name, labels, value in samples}
    gets = {le: value for (name, method, le), value in got.items() if name == f"{LATENCY}_bucket" and method == "GET"}
    assert gets == {
        "0.0005": 3,
        "0.001": 4,
        "0.0025": 4,
        "0.005": 4,
        "0.01": 4,
        "0.025": 4,
        "0.05": 4,
        "0.1": 4,
        "0.25": 4,
        "0.5": 5,
        "1.0": 5,
        "2.5": 5,
        "5.0": 5,
        "10.0": 5,
        "+Inf": 6,
    }
    assert got[(f"{LATENCY}_count", "GET", None)] == 6
    assert abs(got[(f"{LATENCY}_sum", "GET", None)] - 30.3018) < 1e-9
    assert got[(f"{LATENCY}_count", "POST", None)] == 1
    requests = {labels["method"]: value for name, labels, value in families["petrecords_http_requests"][1]}
    assert requests == {"GET": 6, "POST": 1}
    assert not [name for name in families if "parts" in name]
