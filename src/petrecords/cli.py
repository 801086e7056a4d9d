"""The command line: serve, migrate, token, and a client of a running server for every resource. It parses
arguments and calls the code the app uses.

Each command imports what it needs when it runs (the server, the database layer, an HTTP client), so that
`petrecords token` and the client commands start in a fraction of a second.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from petrecords.config import ConfigurationError, Settings, check_environment
from petrecords.portability.errors import CommandFailed, UseAnotherTool

Command = Callable[[argparse.Namespace, Settings], None]
WHOOF_SYSTEM_USER = "whoof-import@example.invalid"
SETTINGS_THAT_MATTER = """\
settings (environment variables; every one in docs/reference/configuration.md):
  PETRECORDS_DATA_DIR           where the SQLite database and the local signing secret live (./data)
  PETRECORDS_DATABASE_URL       sqlite:///PATH or postgresql://user:password@host:port/db (SQLite in the data dir)
  PETRECORDS_AUTH_SECRET        HS256 secret of local tokens, 32+ bytes (generated in the data dir when unset)
  PETRECORDS_AUTH_MODE          local (petrecords token) or jwks (an identity provider's tokens)
  PETRECORDS_DB_POOL_SIZE       PostgreSQL connections per worker (10)
  PETRECORDS_RATE_LIMIT         requests per minute per caller, 0 for none (6000)
  PETRECORDS_REDIS_URL          share the rate limit between instances
  PETRECORDS_NATS_URL           publish every change to NATS JetStream
  PETRECORDS_ACCESS_LOG         one JSON line per request (true)
"""


def _serve(args: argparse.Namespace, settings: Settings) -> None:
    from petrecords.logs import configure_logging
    from petrecords.serve import serve

    configure_logging(settings.log_level)
    serve(
        settings,
        host=args.host,
        port=args.port,
        workers=args.workers,
        threads=args.threads,
        graceful_timeout=args.graceful_timeout,
    )


def _migrate(args: argparse.Namespace, settings: Settings) -> None:
    from petrecords.db import migrate
    from petrecords.logs import configure_logging

    configure_logging(settings.log_level)
    migrate(settings, args.revision)
    print(f"schema at {args.revision}")


def _token(args: argparse.Namespace, settings: Settings) -> None:
    from petrecords.auth import find_secret, issue_local_token

    if settings.auth_mode != "local":
        raise ConfigurationError(
            f"PETRECORDS_AUTH_MODE is {settings.auth_mode}: the server accepts only its identity provider's "
            "tokens, which this command cannot issue"
        )
    if args.ttl > settings.auth_max_token_lifetime_seconds:
        raise ConfigurationError(
            f"--ttl {args.ttl} exceeds the longest lifetime the server accepts, "
            f"{settings.auth_max_token_lifetime_seconds} seconds (PETRECORDS_AUTH_MAX_TOKEN_LIFETIME_SECONDS)"
        )
    secret, where = find_secret(settings)
    try:
        token = issue_local_token(
            secret, user=args.user, admin=args.admin, ttl_seconds=args.ttl, settings=settings, groups=args.group
        )
    except ValueError as exc:
        raise ConfigurationError(f"--user or --group: {exc}") from None
    print(f"petrecords token: signed with the secret in {where}", file=sys.stderr)
    print(token)


def _export(args: argparse.Namespace, settings: Settings) -> None:
    from petrecords.portability.commands import export

    export(settings, output=args.output)


def _import(args: argparse.Namespace, settings: Settings) -> None:
    from petrecords.portability.commands import import_file

    print(import_file(settings, args.file))


def _import_whoof(args: argparse.Namespace, settings: Settings) -> None:
    from petrecords.portability.commands import import_whoof

    report = import_whoof(
        settings,
        args.url,
        system_user=args.system_user,
        orphan_owner=args.orphan_owner,
        keep_mismatched=args.keep_mismatched,
    )
    for line in report.lines:  # one line for each row that broke a rule, on a terminal or not
        print(line)
    print(report.summary())


def _backup(args: argparse.Namespace, settings: Settings) -> None:
    from petrecords.portability.commands import backup

    print(backup(settings, args.file))


def _restore(args: argparse.Namespace, settings: Settings) -> None:
    from petrecords.portability.commands import restore

    print(restore(settings, args.file))


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _version() -> str:
    return metadata.version("petrecords")


def parser(*, with_client: bool = True) -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="petrecords", description="Pet Records: pets, vaccines and vaccinations.")
    root.add_argument("--version", action="version", version=f"petrecords {_version()}")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    defaults = argparse.ArgumentDefaultsHelpFormatter

    serve = commands.add_parser(
        "serve",
        help="apply pending migrations, then serve HTTP",
        description="Apply pending schema migrations (safe when several instances start at once), then serve.",
        epilog=SETTINGS_THAT_MATTER,
        formatter_class=lambda prog: _DefaultsAndEpilog(prog),
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    # The defaults are the best of the configurations measured on a 2-core machine
    # (bench/results/2026-11-21-serve-configurations.md).
    serve.add_argument("--workers", type=_positive, default=2, help="server processes; about one per core")
    serve.add_argument("--threads", type=_positive, default=2, help="I/O threads per server process")
    serve.add_argument(
        "--graceful-timeout",
        type=_positive,
        default=30,
        help="seconds a worker may take to finish in-flight requests on SIGTERM",
    )
    serve.set_defaults(run=_serve)

    migrate_command = commands.add_parser(
        "migrate", help="apply pending schema migrations and exit", formatter_class=defaults
    )
    migrate_command.add_argument("--revision", default="head", help=argparse.SUPPRESS)
    migrate_command.set_defaults(run=_migrate)

    token = commands.add_parser(
        "token",
        help="print a local bearer token that this environment's server accepts",
        description="Print a bearer token signed with the secret the server in this environment uses: "
        "PETRECORDS_AUTH_SECRET, or the file auth-secret in PETRECORDS_DATA_DIR. Never creates a secret.",
        formatter_class=defaults,
    )
    token.add_argument("--user", required=True, help="the caller's e-mail address")
    token.add_argument("--admin", action="store_true", help="give the token the admin role")
    token.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME",
        help="a group the caller belongs to (a clinic, say), for shares to group:NAME; repeatable",
    )
    token.add_argument("--ttl", type=_positive, default=3600, help="seconds until it expires")
    token.set_defaults(run=_token)

    _add_data_commands(commands)

    if with_client:
        from petrecords.client import add_client_commands, client_resources

        add_client_commands(commands, client_resources())
    return root


def _add_data_commands(commands: Any) -> None:
    """Data in and out: export, import, moving in from Whoof, backup and restore (see docs/how-to)."""
    export = commands.add_parser(
        "export",
        help="write every record and change as JSON Lines, from one snapshot, while the service runs",
        description="Write every record of every resource and every kept change as JSON Lines, read from one "
        "consistent snapshot while the service keeps serving and writing.",
    )
    export.add_argument("--output", type=Path, metavar="FILE", help="write here (replaced once whole), not to stdout")
    export.set_defaults(run=_export)

    load = commands.add_parser(
        "import",
        help="load an export into a database with no records, in one transaction",
        description="Load a file that `petrecords export` wrote into the configured database, which must hold no "
        "record: ids, audit fields, versions, ETags, owners and history as they were. All of it, or nothing.",
    )
    load.add_argument("file", type=Path, metavar="FILE")
    load.set_defaults(run=_import)

    whoof = commands.add_parser(
        "import-whoof",
        help="load a Whoof service's pets, vaccines and vaccinations into a database with no records",
        description="Read the database of a Whoof service and load its records into the configured database, "
        "which must hold no record. Each row that breaks this service's rules is reported on a line of its own.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    whoof.add_argument("url", metavar="POSTGRESQL_URL", help="the Whoof database")
    whoof.add_argument(
        "--system-user",
        default=WHOOF_SYSTEM_USER,
        metavar="EMAIL",
        help="who wrote a record whose audit user is not an e-mail address",
    )
    whoof.add_argument("--orphan-owner", metavar="EMAIL", help="the owner of pets that have none (else skipped)")
    whoof.add_argument(
        "--keep-mismatched",
        action="store_true",
        help="load a vaccination of a vaccine for another pet type, with a note in its notes (else skipped)",
    )
    whoof.set_defaults(run=_import_whoof)

    backup = commands.add_parser(
        "backup",
        help="write a consistent copy of the SQLite database to a new file, while the service runs",
        description="Copy the SQLite database to FILE (which must not exist) through SQLite's online backup, "
        "while the service keeps serving and writing. On PostgreSQL: use pg_dump (exit status 2).",
    )
    backup.add_argument("file", type=Path, metavar="FILE")
    backup.set_defaults(run=_backup)

    restore = commands.add_parser(
        "restore",
        help="put a backup in place of the SQLite database, which no server may be using",
        description="Put a backup that `petrecords backup` wrote in place of the configured SQLite database. "
        "Refused while a server uses it. On PostgreSQL: use pg_restore (exit status 2).",
    )
    restore.add_argument("file", type=Path, metavar="FILE")
    restore.set_defaults(run=_restore)


class _DefaultsAndEpilog(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults after each option, and the epilog as written."""


def _describe(exc: ValidationError) -> str:
    """A settings error in one line, naming each variable (a rule between several names them itself)."""
    problems = []
    for error in exc.errors():
        name = "_".join(str(part) for part in error["loc"] if isinstance(part, str)).upper()
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"PETRECORDS_{name}: {message}" if name else message)
    return "; ".join(problems)


SERVER_COMMANDS = ("serve", "migrate", "token", "export", "import", "import-whoof", "backup", "restore")


def main(argv: Sequence[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else list(argv)
    # The server's own commands start without the client commands' parsers.
    with_client = not arguments or arguments[0] not in SERVER_COMMANDS
    args = parser(with_client=with_client).parse_args(arguments)
    run: Command = args.run
    try:
        check_environment(os.environ)
        settings = Settings()
        run(args, settings)
    except ValidationError as exc:
        sys.exit(f"petrecords {args.command}: {_describe(exc)}")
    except ConfigurationError as exc:
        sys.exit(f"petrecords {args.command}: {exc}")
    except CommandFailed as exc:
        # A data command's failure: one line, and the target as it was (see petrecords.portability).
        sys.exit(f"petrecords {args.command}: {exc}")
    except UseAnotherTool as exc:
        print(f"petrecords {args.command}: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
