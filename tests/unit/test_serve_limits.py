"""How `petrecords serve` sizes itself for many connections: the open-file limit and connections per worker."""

from __future__ import annotations

import json
import logging
import resource
import subprocess
import sys

import pytest

from petrecords.config import Settings
from petrecords.serve import _connections_per_worker

_CHILD = """
import json, resource
from petrecords.logs import configure_logging
from petrecords.serve import _raise_open_file_limit
configure_logging("INFO")
in_force = _raise_open_file_limit()
print(json.dumps({"returned": in_force, "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))
"""


class TestOpenFileLimit:
    def test_the_soft_limit_is_raised_to_the_hard_one_and_logged(self) -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard <= 256:
            pytest.fail(f"the hard open-file limit ({hard}) leaves nothing to raise; this test needs more")
        # The shell lowers the soft limit for the child alone, as a service manager's default would.
        child = subprocess.run(
            ["sh", "-c", 'ulimit -Sn 256 && exec "$0" -c "$1"', sys.executable, _CHILD],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        *logged, result = child.stdout.strip().splitlines()
        figures = json.loads(result)

        expected = hard if hard != resource.RLIM_INFINITY else 1 << 20
        assert figures == {"returned": expected, "soft": expected}
        assert any(
            json.loads(line)["message"] == f"raised the open-file limit from 256 to {expected}" for line in logged
        )


class TestConnectionsPerWorker:
    def test_as_configured_when_the_limit_holds_them(self, caplog: pytest.LogCaptureFixture) -> None:
        settings = Settings(max_connections_per_worker=10000)

        assert _connections_per_worker(settings, 20000) == 10000
        assert not caplog.records

    def test_fewer_with_a_warning_when_it_does_not(self, caplog: pytest.LogCaptureFixture) -> None:
        settings = Settings(max_connections_per_worker=10000)

        with caplog.at_level(logging.WARNING, logger="petrecords.serve"):
            connections = _connections_per_worker(settings, 2048)

        assert connections == 2048 - 256
        assert "PETRECORDS_MAX_CONNECTIONS_PER_WORKER" in caplog.text

    def test_half_the_limit_at_least(self) -> None:
        assert _connections_per_worker(Settings(max_connections_per_worker=10000), 300) == 150
