"""The samples of a py-spy profile of a server worker, by the layer of the request they fall in.

Record a worker of `petrecords serve` (or of bench/ceiling.py) under load, in py-spy's raw format:

    py-spy record --format raw --nonblocking --rate 500 --duration 10 --pid WORKER -o profile.txt

then `python bench/profile_layers.py profile.txt`. Only the samples of the worker's event loop thread count
(its Python code runs there alone); those of the HTTP server's own threads carry no Python frame and are left
out. Each sample goes to the layer of its deepest frame that belongs to one, so a layer's share includes what
it calls but not what another layer below it does: the pysqlite3 `execute` and `fetchall` calls are
"SQL statement", the await of Granian's `send` is "send to the HTTP server", and so on.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

# (layer, function names or prefixes) in the order they are tried from the deepest frame up.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("access log", ("AccessLog.", "AccessLine")),
    ("metrics", ("Metrics.", "_Tally")),
    ("token check", ("admit", "VerifiedTokenCache.", "LocalTokenVerifier.", "bearer_token")),
    ("rate limit", ("LocalRateLimiter.", "RedisRateLimiter.")),
    (
        "answer: id, ETag, record shown as JSON",
        ("parse_record_id", "etag_of", "entity_tag", "show", "format_timestamp", "Resource.embeds"),
    ),
    (
        "transaction and store around the statement",
        (
            "SqliteStore.",
            "SqliteTransaction.",
            "SqlTransaction.",
            "_Database.",
            "_driver_values",
            "_driver_value",
            "_lookup_of",
            "Reader.",
            "_uuid",
            "Counter.",
            "load_visible",
            "visible",
        ),
    ),
    (
        "edge: request id, security headers, HEAD",
        ("ServiceEdge.", "_ambiguous_path", "_RequestIds.", "_new_request_id"),
    ),
    ("lookup path: dispatch, If-None-Match, answer's headers", ("RecordLookups.", "look_up")),
    ("the Litestar app (framework path)", ("Litestar.", "ASGIRouter.", "ASGIRoute.", "HTTPRoute.")),
    ("bare lookup app (ceiling)", ("create_app.<locals>.app", "SqliteBackend.", "create_app.<locals>.respond")),
)
LOOP = "event loop, Granian's callbacks (outside the app)"


def _name(frame: str) -> str:
    return frame.split(" (", 1)[0]


def layer_of(frames: list[str]) -> str:
    names = [_name(frame) for frame in frames]
    deepest = names[-1]
    if deepest.startswith(
        ("SqliteTransaction._run", "SqliteTransaction.get", "SqliteStore.read", "SqliteBackend.lookup")
    ):
        return "SQL statement (pysqlite3)"
    if "send_with_headers" in deepest or deepest.startswith("create_app.<locals>.respond"):
        # The last frame of a sample taken while Granian's `send` runs is the Python line that awaits it: in the
        # service always the edge's, which every answer passes.
        return "send to the HTTP server"
    # py-spy does not always reach the root of a stack: a layer is recognised by its own frames wherever they are.
    for name in reversed(names):
        for layer, prefixes in LAYERS:
            if name.startswith(prefixes):
                return layer
    return LOOP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile", type=Path, help="py-spy's raw output (--format raw)")
    args = parser.parse_args()
    samples: collections.Counter[str] = collections.Counter()
    for line in args.profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack.strip():
            continue  # a thread of the HTTP server itself: no Python frame
        samples[layer_of(stack.split(";"))] += int(count)
    total = sum(samples.values())
    print(f"{total} samples of the event loop thread")
    for layer, count in samples.most_common():
        print(f"  {layer:<58} {count / total:6.1%}")


if __name__ == "__main__":
    main()
