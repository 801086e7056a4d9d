"""The command line: serve, migrate, token. It parses arguments and calls the code the app uses."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence

from petrecords.auth import issue_local_token, load_or_create_secret
from petrecords.config import Settings
from petrecords.db import SqliteTooOld, migrate
from petrecords.logs import configure_logging


def _serve(args: argparse.Namespace, settings: Settings) -> None:
    from granian.constants import Interfaces, Loops
    from granian.server import Server

    migrate(settings)
    load_or_create_secret(settings)
    metrics_dir = None
    if args.workers > 1:
        # Workers share one set of metrics through files in this directory (prometheus_client multiprocess mode).
        metrics_dir = tempfile.mkdtemp(prefix="petrecords-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    try:
        Server(
            "petrecords.app:create_app_from_environment",
            address=args.host,
            port=args.port,
            interface=Interfaces.ASGI,
            workers=args.workers,
            runtime_threads=args.threads,
            loop=Loops.uvloop,
            factory=True,
            log_access=False,
            workers_kill_timeout=args.graceful_timeout,
        ).serve()
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _migrate(args: argparse.Namespace, settings: Settings) -> None:
    migrate(settings, args.revision)
    print(f"schema at {args.revision}")


def _token(args: argparse.Namespace, settings: Settings) -> None:
    if args.ttl > settings.auth_max_token_lifetime_seconds:
        sys.exit(
            f"petrecords token: --ttl {args.ttl} exceeds the longest lifetime the server accepts, "
            f"{settings.auth_max_token_lifetime_seconds} seconds (PETRECORDS_AUTH_MAX_TOKEN_LIFETIME_SECONDS)"
        )
    secret = load_or_create_secret(settings)
    try:
        token = issue_local_token(secret, user=args.user, admin=args.admin, ttl_seconds=args.ttl, settings=settings)
    except ValueError as exc:
        sys.exit(f"petrecords token: {exc}")
    print(token)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="petrecords", description="Pet Records service.")
    commands = root.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="apply pending migrations, then serve HTTP")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    # The defaults are the best of the configurations measured on a 2-core machine (bench/README.md).
    serve.add_argument("--workers", type=_positive, default=2, help="server processes (default 2)")
    serve.add_argument("--threads", type=_positive, default=2, help="I/O threads per server process (default 2)")
    serve.add_argument(
        "--graceful-timeout",
        type=_positive,
        default=30,
        help="seconds a worker may take to finish in-flight requests on shutdown",
    )
    serve.set_defaults(run=_serve)

    migrate_command = commands.add_parser("migrate", help="apply pending schema migrations and exit")
    migrate_command.add_argument("--revision", default="head", help=argparse.SUPPRESS)
    migrate_command.set_defaults(run=_migrate)

    token = commands.add_parser("token", help="print a local bearer token that this environment's server accepts")
    token.add_argument("--user", required=True, help="the caller's e-mail address")
    token.add_argument("--admin", action="store_true", help="give the token the admin role")
    token.add_argument("--ttl", type=_positive, default=3600, help="seconds until it expires (default 3600)")
    token.set_defaults(run=_token)
    return root


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    settings = Settings()
    if args.command != "token":
        configure_logging(settings.log_level)
    try:
        args.run(args, settings)
    except SqliteTooOld as exc:
        sys.exit(f"petrecords {args.command}: {exc}")
