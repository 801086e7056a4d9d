"""Schema-driven fuzzing: schemathesis, every check, against a real `petrecords serve` on each database.

Schemathesis reads the service's own /openapi.json and runs its four phases (examples, coverage,
fuzzing, and stateful sequences that follow the document's links) with every check it has, including
its object-level authorization check for two users. tests/fuzz/schemathesis_hooks.py adds the
contract's stricter form of that check, keeps the cases meant to be valid within the rules the document
states in prose, and works around one schemathesis bug.

The thorough run (`make test-long`) runs twice on each database: as alice (a non-admin; bob is her peer) over
every operation the document does not reserve for the `admin` role, then as the administrator over every
operation. The quick run of `make test` runs one of the two on each database, a few examples each and no coverage
phase (its thousands of boundary cases): as alice on SQLite and as the administrator on PostgreSQL.

The runs are random; a failure prints the seed, and PETRECORDS_FUZZ_SEED=N repeats those runs.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from petrecords.config import DEFAULT_PET_TYPES
from tests.e2e.servers import Server, running_server
from tests.support import throwaway_postgres

pytestmark = pytest.mark.slow

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
REPOSITORY = Path(__file__).resolve().parents[2]
# Test cases per operation and phase (the stateful phase makes about as many scenarios): a few in `make test` (whose
# quick run leaves out the coverage phase, see QUICK_PHASES), and many in `make test-long`.
QUICK = 5
THOROUGH = 50
ENOUGH_FOR_A_RATE = THOROUGH
"""Examples per operation from which schemathesis' "mostly rejected" warning is a finding, not chance."""
SECONDS_PER_EXAMPLE = 8.0
"""How long a pass may take, for each example asked for, beyond FIRST_SECONDS (on a busy or slow machine: a quick
pass took over 150 s on a machine three times slower than usual, with the rest of the suite beside it)."""
FIRST_SECONDS = 300
USERS = {"alice": "alice@example.com", "bob": "bob@example.com", "admin": "admin@example.com --admin"}
# Who each run sends every request as, and the peers (who must never see each other's records) it probes with.
PASSES = {"alice": ["alice", "bob"], "admin": []}
QUICK_PASSES = {"sqlite": "alice", "postgresql": "admin"}
PHASES = ("examples", "coverage", "fuzzing", "stateful")
QUICK_PHASES = ("examples", "fuzzing", "stateful")
RUNS = [
    pytest.param(QUICK, None, id="quick"),
    *(pytest.param(THOROUGH, user, id=f"thorough as {user}", marks=pytest.mark.long) for user in PASSES),
]
"""(examples, caller): a quick run as one caller (QUICK_PASSES), and a thorough run as each, a test of its own so
that the workers of `make test-long` share them."""
# Every check is on by default; none is named on the command line, which would turn back on the ones that an
# `[[operations]]` entry below turns off for some operations.
CONFIG = """\
[generation]
database = "none"

[auth.wfc]
path = "auth.json"
user = "{user}"
{peers}

[checks.positive_data_acceptance]
# Schemathesis' default answers to a schema-valid request, plus two that the contract gives to requests
# that no schema can tell from others: 412 when If-Match names an ETag the record no longer has, and
# 422 when an Idempotency-Key is sent again with another body. (A 5xx fails `not_a_server_error`.)
expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "412", "422", "429", "5xx"]

[checks.negative_data_rejection]
# Schemathesis' defaults, plus 413, 414 and 431: a body over its limit (16 KiB by default) is refused before it
# is read, and a request target over 64 KiB, or a head over 80 KiB (say, thousands of ids), by the HTTP server
# before the service sees it. The document says so.
expected-statuses = [
    "400", "401", "403", "404", "405", "406", "409", "413", "414", "415", "422", "428", "429", "431", "5xx"
]

[[operations]]
# A deleted record's history stays readable, by contract: reading it after the DELETE is not a use after free.
include-path-regex = "/history$"
checks.use_after_free.enabled = false

[[operations]]
# A certificate's link answers 410 once its certificate is deleted (revoked) or has expired, by contract: a stateful
# run reaches one through the create's idempotent replay (the same key and body), which shows again the link of a
# certificate it has deleted since.
include-path-regex = "^/public/certificates/"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "410", "412", "422", "429", "5xx"
]
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    # No rate limit: schemathesis sends far more than the default 6000 requests a minute.
    settings = {"PETRECORDS_RATE_LIMIT": "0", "PETRECORDS_ACCESS_LOG": "false"}
    users = list(USERS.values())
    if request.param == "sqlite":
        with running_server(tmp_path / "data", users=users, settings=settings) as started:
            yield started
        return
    with (
        throwaway_postgres(migrated=True) as url,
        running_server(tmp_path / "data", database_url=url, users=users, settings=settings) as started,
    ):
        yield started


def _write_configuration(server: Server, directory: Path, identity: str, document: dict[str, Any]) -> None:
    auth = {
        "auth": [
            {"name": name, "fixedHeaders": [{"name": "Authorization", "value": f"Bearer {server.tokens[user]}"}]}
            for name, user in USERS.items()
        ]
    }
    (directory / "auth.json").write_text(json.dumps(auth))
    peers = f"peers = {json.dumps(PASSES[identity])}" if PASSES[identity] else ""
    configuration = CONFIG.replace("{user}", identity).replace("{peers}", peers)
    (directory / "schemathesis.toml").write_text(configuration + _catalogue_histories(document))


def _catalogue_histories(document: dict[str, Any]) -> str:
    """Schemathesis takes an id that a user sent (a vaccine named in their new vaccination) for an object that
    user owns, and a peer's read of it for a bypass unless the peer can list an equivalent body. A catalogue
    (a collection no one owns: its list has no `ownerId` filter) is everyone's to read, history included, which
    is no list; the hooks' own check covers what users own."""
    entries = []
    for path in document["paths"]:
        collection = path.split("/{", 1)[0]
        listing = document["paths"].get(collection, {}).get("get", {})
        owned = any(parameter.get("name") == "ownerId" for parameter in listing.get("parameters", []))
        if path.endswith("/history") and listing and not owned:
            entries.append(
                f'\n[[operations]]\ninclude-path = "{path}"\nchecks.object_level_authorization.enabled = false\n'
            )
    return "".join(entries)


def _api_operations(document: dict[str, Any], *, admin: bool) -> dict[str, str]:
    """`METHOD /v1/path` -> operation id, of every API operation that the caller may call: a non-admin none
    whose security requirement names the `admin` role (they would get only 403 from it)."""
    return {
        f"{method.upper()} {path}": operation["operationId"]
        for path, item in document["paths"].items()
        if path.startswith("/v1/")
        for method, operation in item.items()
        if isinstance(operation, dict)
        and (
            admin
            or not any(
                "admin" in roles for requirement in operation.get("security", []) for roles in requirement.values()
            )
        )
    }


def _seed_vaccines(server: Server) -> None:
    """A vaccine for a few pet types, so that reads of the catalogue and new vaccinations find some from the
    start (the hooks make more when they need them)."""
    admin = {"Authorization": f"Bearer {server.tokens[USERS['admin']]}"}
    for pet_type in DEFAULT_PET_TYPES[:4]:
        body = {"name": f"{pet_type} core", "petType": pet_type, "duration": 365}
        response = httpx.post(f"{server.url}/v1/vaccines", json=body, headers=admin)
        assert response.status_code == 201, response.text


def _readable(output: str, width: int = 600) -> str:
    """The output with its very long lines (whole generated URLs and bodies) cut short."""
    return "\n".join(line if len(line) <= width else line[:width] + " [...]" for line in output.splitlines())


@pytest.mark.parametrize(("examples", "caller"), RUNS)
def test_schemathesis_finds_nothing(
    server: Server, tmp_path: Path, examples: int, caller: str | None, request: pytest.FixtureRequest
) -> None:
    document = httpx.get(f"{server.url}/openapi.json").json()
    _seed_vaccines(server)
    everything = _api_operations(document, admin=True)
    user = caller or QUICK_PASSES[request.node.callspec.params["server"]]
    operations = _api_operations(document, admin=user == "admin")
    excluded = [operation_id for label, operation_id in everything.items() if label not in operations]
    _run(server, tmp_path / f"schemathesis-{user}", user, excluded, operations, document, examples)
    server_log = server.output(full=True)
    assert "Traceback" not in server_log, server_log[-5000:]
    assert " failed" not in server_log, server_log[-5000:]


def _run(
    server: Server,
    run_dir: Path,
    user: str,
    excluded: list[str],
    operations: dict[str, str],
    document: dict[str, Any],
    examples: int,
) -> None:
    run_dir.mkdir()
    _write_configuration(server, run_dir, user, document)
    # A seed of our own when none is given, so that a run cut short by the timeout (which prints nothing of
    # schemathesis' own) can be repeated too.
    seed = os.environ.get("PETRECORDS_FUZZ_SEED") or str(random.randrange(2**31))
    command = [
        str(SCHEMATHESIS),
        "--config-file",
        str(run_dir / "schemathesis.toml"),
        "run",
        f"{server.url}/openapi.json",
        "--max-examples",
        str(examples),
        "--workers",
        "1",
        "--phases",
        ",".join(QUICK_PHASES if examples == QUICK else PHASES),
        "--report",
        "json",
        "--report-json-path",
        str(run_dir / "report.json"),
        "--seed",
        seed,
        *(option for operation_id in excluded for option in ("--exclude-operation-id", operation_id)),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPOSITORY),
        "SCHEMATHESIS_HOOKS": "tests.fuzz.schemathesis_hooks",
        "FUZZ_AUTH_FILE": str(run_dir / "auth.json"),
        "FUZZ_USER": user,
        "NO_COLOR": "1",
    }

    try:
        finished = subprocess.run(
            command,
            cwd=run_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=FIRST_SECONDS + SECONDS_PER_EXAMPLE * examples,
            check=False,
        )
    except subprocess.TimeoutExpired as timed_out:
        # What it had printed (bytes, whatever `text` says), and what the server logged meanwhile.
        parts = (timed_out.stdout, timed_out.stderr)
        partial = _readable("".join(p.decode(errors="replace") if isinstance(p, bytes) else p or "" for p in parts))
        pytest.fail(
            f"schemathesis ran past {timed_out.timeout:g} s as {user} (PETRECORDS_FUZZ_SEED={seed} repeats it):\n"
            f"{partial[-5000:]}\n--- server log ---\n{server.output()}"
        )

    output = _readable(finished.stdout + finished.stderr)
    print(f"--- as {user} ---\n{output[-3000:]}")  # the summary, for `pytest -s`
    assert finished.returncode == 0, output[-20000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["complete"], output[-5000:]
    assert (report["failures"], report["errors"]) == ([], []), output[-20000:]
    ran = QUICK_PHASES if examples == QUICK else PHASES
    assert all(report["phases"][phase]["status"] == "success" for phase in ran), report["phases"]
    assert report["operations"]["tested"] == report["operations"]["selected"], report["operations"]
    assert report["test_cases"]["generated"] >= examples, report["test_cases"]
    # Every operation of the API got past validation, references and permissions at least once.
    accepted = {
        operation: sum(phase["accepted"] for phase in phases.values())
        for operation, phases in report["valid_rates"].items()
        if " /v1/" in operation
    }
    assert set(accepted) == set(operations), (user, accepted)
    assert all(accepted.values()), (user, accepted)
    # Warnings that mean the document and the service disagree, or that schemathesis could not read a pattern.
    # "Mostly rejected" is a rate: of a few cases (a delete of ids that are not there, say) it says nothing, so it
    # counts in the thorough run only.
    warnings = ("missing_auth", "unsupported_regex", "unresolvable_reference")
    for warning in (*warnings, *(("validation_mismatch",) if examples >= ENOUGH_FOR_A_RATE else ())):
        assert not report["warnings"][warning], (user, warning, report["warnings"][warning])
