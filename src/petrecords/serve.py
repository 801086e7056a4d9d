"""`petrecords serve`: migrations, then the app under Granian, configured for the open internet."""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import importlib
import logging
import os
import re
import resource
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

from petrecords.auth import load_or_create_secret
from petrecords.config import READY_FILE_VARIABLE, STOPPING_FILE_VARIABLE, ConfigurationError, Settings
from petrecords.db import check_database_folder, migrate, serving

log = logging.getLogger("petrecords.serve")

# Open files a server process needs besides its connections: the listening socket, the event loop, the
# database's files or pool, the metrics files, the logs. About 50 are used; the rest is room.
_RESERVED_FILES = 256
# Linux never allows more open files per process than this by default (fs.nr_open).
_MOST_OPEN_FILES = 1 << 20
# Room for the longest request head the service reads: a 65,534-byte target (the HTTP server's limit) and
# its headers. The server reads in growing chunks, so it refuses (431) a head somewhere between this and
# twice this; a slow client can make it hold that much for each of its connections.
_MAX_HEAD_BYTES = 80 * 1024
APP_FACTORY = "petrecords.app:create_app_from_environment"
"""What each worker calls to make its app."""


def _raise_open_file_limit() -> int:
    """Raise the soft limit on open files to the hard one, since every connection is an open file; the
    limit in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _MOST_OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            return soft
        log.info("raised the open-file limit from %d to %d", soft, wanted)
        return wanted
    return soft


def _connections_per_worker(settings: Settings, open_files: int) -> int:
    wanted = settings.max_connections_per_worker
    room = max(open_files - _RESERVED_FILES, open_files // 2)
    if room >= wanted:
        return wanted
    log.warning(
        "the open-file limit (%d) leaves room for %d connections per worker, not the %d of "
        "PETRECORDS_MAX_CONNECTIONS_PER_WORKER; raise the hard limit (ulimit -Hn, LimitNOFILE) to hold them",
        open_files,
        room,
        wanted,
    )
    return room


def check_port(host: str, port: int) -> None:
    """Refuse, in one clear line, an address that another process already listens on (Granian would fail
    later, with a traceback)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            reason = "already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc)).lower()
            raise ConfigurationError(f"--host {host} --port {port}: cannot listen there: {reason}") from None


class NotListeningYet(logging.Filter):
    """Keeps back Granian's "Listening at" line, which it says before it starts a single worker; WorkersReady
    says it once every worker accepts connections."""

    def filter(self, record: logging.LogRecord) -> bool:
        return hasattr(record, "fields") or not record.getMessage().startswith("Listening at")


_WORKER_STARTED = re.compile(r"Started worker-([0-9]+)")


class WorkersReady(logging.Handler):
    """Sees each worker's "Started worker-N" line, which a worker logs as it begins to accept connections, and
    marks it ready in `directory`. The last of `workers` to start makes the ready file (/readyz answers 200 from
    then on) and says where the server listens."""

    def __init__(self, *, directory: str, workers: int, url: str) -> None:
        super().__init__()
        self._directory = Path(directory)
        self._workers = workers
        self._url = url

    def emit(self, record: logging.LogRecord) -> None:
        started = _WORKER_STARTED.fullmatch(record.getMessage())
        if started is None:
            return
        (self._directory / f"worker-{started.group(1)}").touch()
        if len(list(self._directory.glob("worker-*"))) < self._workers:
            return
        try:
            # Made once: a worker started again later (after a crash) changes nothing.
            with (self._directory / "ready").open("x"):
                pass
        except FileExistsError:
            return
        # Where Granian's own line went, whatever the service's log level.
        logging.getLogger("_granian").info("Listening at: %s", self._url, extra={"fields": {"workers": self._workers}})


def _granian_logging(serve_dir: Path, *, workers: int, url: str) -> dict[str, Any]:
    """Granian's logging, in the server and in each worker: its lines as JSON, through the service's formatter,
    and each worker's start seen by WorkersReady."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "petrecords.logs.JsonFormatter"}},
        "filters": {"not_listening_yet": {"()": f"{__name__}.NotListeningYet"}},
        "handlers": {
            "json": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "filters": ["not_listening_yet"],
                "stream": "ext://sys.stdout",
            },
            "ready": {"()": f"{__name__}.WorkersReady", "directory": str(serve_dir), "workers": workers, "url": url},
        },
        "loggers": {
            "_granian": {"handlers": ["json", "ready"], "level": "INFO", "propagate": False},
            "granian.access": {"handlers": ["json"], "level": "INFO", "propagate": False},
        },
    }


def _preload_app() -> None:
    """Import the app's modules here, once, before Granian forks the workers: each worker then only makes its app
    (about a third of a worker's start was importing them), and one started again after a crash does the same.
    What this process holds from then on is frozen out of the collector's passes, so that a worker's own passes
    neither walk it nor write to its pages, which the workers share with this process until one of them writes."""
    importlib.import_module(APP_FACTORY.partition(":")[0])
    gc.collect()
    gc.freeze()


def serve(settings: Settings, *, host: str, port: int, workers: int, threads: int, graceful_timeout: int) -> None:
    # Before Granian is imported: importing it raises the limit too, without a word.
    open_files = _raise_open_file_limit()
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings
    from granian.server import Server

    check_port(host, port)
    check_database_folder(settings)  # before the secret is made in the data directory
    load_or_create_secret(settings)
    # Held until the server has stopped (or the process ends): `petrecords restore` refuses while it is.
    held = contextlib.ExitStack()
    held.enter_context(serving(settings))
    metrics_dir = None
    if workers > 1:
        # Workers share one set of metrics through files in this directory (prometheus_client multiprocess mode).
        # Set before anything imports prometheus_client (the migrations import the resources, and some of those
        # the metrics), which chooses how values are kept when it is first imported.
        metrics_dir = tempfile.mkdtemp(prefix="petrecords-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    try:
        migrate(settings)
    except BaseException:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
        raise
    # Where the server says that it is shutting down: a worker waits for its requests to end before it stops,
    # and a live change stream never ends unless told to.
    serve_dir = Path(tempfile.mkdtemp(prefix="petrecords-serve-"))
    stopping = serve_dir / "stopping"
    os.environ[STOPPING_FILE_VARIABLE] = str(stopping)
    os.environ[READY_FILE_VARIABLE] = str(serve_dir / "ready")
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    connections = _connections_per_worker(settings, open_files)
    _preload_app()

    drain_seconds = settings.shutdown_drain_seconds

    class DrainingServer(Server):  # type: ignore[misc,valid-type]
        def signal_handler_interrupt(self, *args: Any, **kwargs: Any) -> None:
            first = not stopping.exists()
            stopping.touch()
            stop = functools.partial(super().signal_handler_interrupt, *args, **kwargs)
            if first and drain_seconds:
                # Serve on while /readyz answers 503, so that a load balancer stops sending requests here before
                # connections are refused; a second signal stops at once.
                log.info("shutting down in %g s; not ready meanwhile", drain_seconds)
                timer = threading.Timer(drain_seconds, stop)
                timer.daemon = True
                timer.start()
                return
            stop()

    try:
        DrainingServer(
            APP_FACTORY,
            address=host,
            port=port,
            interface=Interfaces.ASGI,
            workers=workers,
            runtime_threads=threads,
            loop=Loops.uvloop,
            # HTTP/1.1 alone: the automatic HTTP/2 detection reads a new connection's first bytes with no
            # time limit, so connections that send nothing would be held for ever.
            http=HTTPModes.http1,
            # The service has no WebSocket endpoint; with them on, an upgrade request would get the HTTP
            # server's own bare 403 instead of the service's 404.
            websockets=False,
            http1_settings=HTTP1Settings(
                # One limit for both: a request head must be complete this long after the connection
                # opened or the previous answer went out, so idle keep-alive connections end too.
                header_read_timeout=round(settings.idle_timeout_seconds * 1000),
                keep_alive=True,
                max_buffer_size=_MAX_HEAD_BYTES,
            ),
            # The connections a worker holds at once. Granian's default (backlog ÷ workers, 512 here) lets
            # a few hundred slow clients leave no room for anyone else.
            backpressure=connections,
            factory=True,
            log_access=False,
            log_dictconfig=_granian_logging(serve_dir, workers=workers, url=url),
            workers_kill_timeout=graceful_timeout,
        ).serve()
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
        shutil.rmtree(serve_dir, ignore_errors=True)
        held.close()
