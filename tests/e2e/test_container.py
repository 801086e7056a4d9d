"""The production install: the wheel and the pinned requirements of `make dist`, and the Dockerfile that installs
them.

- The wheel's dependencies are pyproject.toml's runtime ones, none of the dev group's; requirements.txt pins
  every package of uv.lock that serving needs, with hashes, and nothing of the dev group.
- The Dockerfile's steps run as a script in an empty directory on every machine (no Docker engine runs on most
  of the test machines): each instruction as the engine would run it, an ARG that is an absolute path placed in
  that directory (the image's file system), the commands as written (a cache mount is the same path on this
  machine, kept between runs as the engine keeps it). Its entry point is then started as the
  Dockerfile's USER (setpriv) in a network namespace of its own, as in a container; the HEALTHCHECK must pass, the
  data must be written as that user, STOPSIGNAL must end it cleanly. The environment it made holds the
  requirements' packages alone, at the versions these tests run with.
- Where a Docker engine answers, the image is built and run: healthy, not root, stopped cleanly.

The two that install (the script, the image) are long tests, run by `make test-long`; `make test` checks the two
files of dist/ they install.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import tomllib
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.e2e.checkout import ROOT, checkout, make_dist
from tests.e2e.debian import stop

pytestmark = pytest.mark.slow

HEALTHY_SECONDS = 120.0
"""How long the health check may take to pass: the workers' first start compiles nothing, but a busy machine is
slow."""
STOP_SECONDS = 30.0
BUILD_SECONDS = 900
VENV_OWN = {"pip", "setuptools", "petrecords"}
"""What a virtual environment holds besides the requirements: its installer (Python 3.11's venv adds setuptools)
and the wheel."""
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_CACHE_MOUNT = re.compile(r"^--mount=type=cache,target=/\S+\s+")


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(line).name) for line in requirements}


def _project() -> dict[str, list[str]]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {"runtime": pyproject["project"]["dependencies"], "dev": pyproject["dependency-groups"]["dev"]}


def _pins(requirements: Path, *, here: bool = False) -> dict[str, str]:
    """requirements.txt's packages and versions, each asserted pinned with `==` and given hashes; with `here`, only
    those this machine and Python install (their markers hold)."""
    pins = {}
    for entry in re.split(r"\n(?=\S)", requirements.read_text()):
        if not entry or entry.startswith("#"):
            continue
        requirement = Requirement(entry.split(" \\\n", 1)[0].strip())
        assert len(requirement.specifier) == 1, entry
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", entry
        assert "--hash=sha256:" in entry, entry
        if not here or requirement.marker is None or requirement.marker.evaluate():
            pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make dist` in a checkout of the repository: the build context of `docker build`."""
    return make_dist(checkout(tmp_path_factory.mktemp("checkout")))


def test_the_wheel_depends_on_what_serving_needs_alone(dist: Path) -> None:
    (wheel,) = dist.glob("petrecords-*-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        lines = archive.read(name).decode().splitlines()
        packaged = set(archive.namelist())
    required = [line.removeprefix("Requires-Dist: ") for line in lines if line.startswith("Requires-Dist: ")]
    project = _project()
    assert _names(required) == _names(project["runtime"])
    assert not _names(required) & _names(project["dev"])
    assert "petrecords/migrations/script.py.mako" in packaged


def test_the_requirements_pin_the_lock_and_leave_the_dev_tools_out(dist: Path) -> None:
    pins = _pins(dist / "requirements.txt")
    project = _project()
    assert _names(project["runtime"]) <= set(pins)
    assert not _names(project["dev"]) & set(pins)
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    locked = {canonicalize_name(package["name"]): package["version"] for package in lock["package"]}
    assert {name: locked[name] for name in pins} == pins
    assert "petrecords" not in pins


@dataclass
class Image:
    """What the Dockerfile made when run as a script: its variables' values, and how the container runs."""

    base: str = ""
    environment: dict[str, str] = field(default_factory=dict)
    user: str = "0"
    volumes: list[str] = field(default_factory=list)
    stop_signal: str = "SIGTERM"
    healthcheck: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """Each instruction and its arguments, continuation lines joined, comments left out."""
    instructions, pending = [], ""
    for line in dockerfile.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        pending += line.rstrip().removesuffix("\\") if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            keyword, _, arguments = pending.strip().partition(" ")
            instructions.append((keyword.upper(), arguments.strip()))
            pending = ""
    return instructions


def _script(dockerfile: Path, *, root: Path, context: Path, state: Path) -> tuple[str, Image, list[str]]:
    """A bash script of the Dockerfile's steps; what it knows of the image without running them; and the names of
    the variables the image sets (ENV)."""
    lines = ["set -euo pipefail", f"cd {shlex.quote(str(root))}"]
    image, environment = Image(), []
    for keyword, arguments in _instructions(dockerfile):
        if keyword == "FROM":
            image.base = arguments
        elif keyword == "ARG":
            name, _, default = arguments.partition("=")
            # The image's file system is the directory: a path the Dockerfile names is made in it.
            value = f"{root}{default}" if default.startswith("/") else default
            lines.append(f"export {name}={shlex.quote(value)}")
        elif keyword == "ENV":
            environment += [token.partition("=")[0] for token in shlex.split(arguments)]
            lines.append(f"export {arguments}")
        elif keyword == "COPY":
            *sources, target = shlex.split(arguments)
            assert not any(source.startswith("--") for source in sources), f"COPY {arguments}: options are not run"
            lines.append(f'mkdir -p "{target}"')
            for source in sources:
                lines.append(f'cp -a {shlex.quote(str(context / source))}/. "{target}"')
        elif keyword == "RUN":
            # A cache the engine keeps between builds is the same path of this machine, kept between runs.
            command = _CACHE_MOUNT.sub("", arguments)
            assert not command.startswith("--"), f"RUN {arguments}: only cache mounts are run"
            lines.append(f"/bin/sh -c {shlex.quote(command)}")
        elif keyword == "USER":
            image.user = arguments
        elif keyword == "VOLUME":
            image.volumes.append(arguments)
        elif keyword == "STOPSIGNAL":
            image.stop_signal = arguments
        elif keyword == "HEALTHCHECK":
            image.healthcheck = json.loads(arguments[arguments.index(" CMD ") + len(" CMD ") :])
        elif keyword == "ENTRYPOINT":
            image.entrypoint = json.loads(arguments)
        else:
            assert keyword in ("EXPOSE", "LABEL"), f"{keyword} {arguments}: the script does not know how to run it"
    lines.append(f"env -0 > {shlex.quote(str(state))}")
    return "\n".join(lines) + "\n", image, environment


def _expanded(text: str, values: dict[str, str]) -> str:
    """$NAME and ${NAME} replaced as the engine replaces them in USER and VOLUME."""
    return _VARIABLE.sub(lambda found: values[found.group(1) or found.group(2)], text)


@contextlib.contextmanager
def _network_namespace() -> Iterator[list[str]]:
    """A network namespace of its own with its loopback up, as a container has: the prefix that runs a command in
    it. Held by a process of its own, and gone with it."""
    holder = subprocess.Popen(["unshare", "--net", "sleep", "infinity"], start_new_session=True)
    try:
        ours = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{holder.pid}/ns/net") == ours:
            assert holder.poll() is None, "unshare --net failed"
            assert time.monotonic() < deadline, "unshare --net did not make a namespace"
            time.sleep(0.01)
        enter = ["nsenter", f"--net=/proc/{holder.pid}/ns/net", "--"]
        subprocess.run([*enter, "ip", "link", "set", "lo", "up"], check=True, timeout=10)
        yield enter
    finally:
        holder.kill()
        holder.wait(timeout=10)


def _as_user(user: str) -> list[str]:
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), f"USER {user}: a number, so that the engine and orchestrators can tell it is not root"
    return ["setpriv", f"--reuid={uid}", f"--regid={gid or uid}", "--clear-groups", "--"]


@pytest.mark.long  # a new virtual environment filled with every requirement: half a minute of a processor
def test_the_dockerfile_runs_as_a_script_in_an_empty_directory(dist: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("running the image's steps as its user, in a network namespace of its own, takes root")
    with tempfile.TemporaryDirectory(prefix="petrecords-image-") as made:
        # Not under pytest's temporary directories, which only their owner may enter: the image's user must.
        root = Path(made)
        root.chmod(0o755)
        state = tmp_path / "environment"
        script, image, environment = _script(ROOT / "Dockerfile", root=root, context=dist.parent, state=state)
        (tmp_path / "dockerfile.sh").write_text(script)
        # The base image's Python is this machine's: the interpreter these tests run on, outside their venv.
        path = f"{sysconfig.get_config_var('BINDIR')}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        built = subprocess.run(
            ["bash", str(tmp_path / "dockerfile.sh")],
            env={"PATH": path, "HOME": "/root", "LANG": "C.UTF-8"},
            capture_output=True,
            text=True,
            timeout=BUILD_SECONDS,
            check=False,
        )
        assert built.returncode == 0, f"the Dockerfile's steps failed:\n{script}\n{built.stdout}\n{built.stderr}"
        assert image.base.startswith(f"python:{sys.version_info.major}.{sys.version_info.minor}-")
        made_values = dict(entry.split("=", 1) for entry in state.read_text().split("\0") if entry)
        container_env = {name: made_values[name] for name in environment} | {"HOME": "/"}
        user = _expanded(image.user, made_values)
        (data,) = [Path(_expanded(volume, made_values)) for volume in image.volumes]
        assert data.is_relative_to(root)
        assert container_env["PETRECORDS_DATA_DIR"] == str(data)
        _installs_the_requirements_alone(Path(made_values["APP"]), dist / "requirements.txt")

        log = tmp_path / "entrypoint.log"
        with _network_namespace() as enter, log.open("wb") as sink:
            server = subprocess.Popen(
                [*enter, *_as_user(user), *image.entrypoint],
                env=container_env,
                cwd=root,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                deadline = time.monotonic() + HEALTHY_SECONDS
                while True:
                    assert server.poll() is None, f"the entry point exited:\n{log.read_text()}"
                    check = subprocess.run(
                        [*enter, *_as_user(user), *image.healthcheck],
                        env=container_env,
                        capture_output=True,
                        timeout=30,
                        check=False,
                    )
                    if check.returncode == 0:
                        break
                    assert time.monotonic() < deadline, f"the HEALTHCHECK never passed:\n{log.read_text()}"
                    time.sleep(0.5)
                server.send_signal(signal.Signals[image.stop_signal])
                assert server.wait(timeout=STOP_SECONDS) == 0, log.read_text()
            finally:
                stop(server)
        uid = int(user.partition(":")[0])
        assert uid != 0
        written = {path.name: path.stat().st_uid for path in data.iterdir()}
        assert {"petrecords.sqlite3", "auth-secret"} <= set(written), written
        assert set(written.values()) == {uid}, written
        assert "Traceback" not in log.read_text()


def _installs_the_requirements_alone(app: Path, requirements: Path) -> None:
    """The environment the image made holds the requirements' packages, at the versions these tests run with."""
    listed = subprocess.run(
        [str(app / "bin" / "python"), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    installed = {canonicalize_name(entry["name"]): entry["version"] for entry in json.loads(listed)}
    pins = _pins(requirements, here=True)
    assert set(installed) - VENV_OWN == set(pins)
    assert {name: installed[name] for name in pins} == pins
    assert {name: metadata.version(name) for name in pins} == pins
    assert not _names(_project()["dev"]) & set(installed)


def _docker(*arguments: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *arguments], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.long  # an image built: minutes
def test_the_image_builds_runs_healthy_and_stops_cleanly(dist: Path) -> None:
    if shutil.which("docker") is None or _docker("info", timeout=20).returncode != 0:
        pytest.skip("no Docker engine answers here; the Dockerfile's steps run as a script in the test above")
    tag = f"petrecords-test:{uuid.uuid4().hex[:12]}"
    built = _docker("build", "--tag", tag, str(dist.parent), timeout=BUILD_SECONDS)
    assert built.returncode == 0, f"docker build failed:\n{built.stdout}\n{built.stderr}"
    container = ""
    try:
        started = _docker("run", "--detach", tag)
        assert started.returncode == 0, started.stderr
        container = started.stdout.strip()
        deadline = time.monotonic() + HEALTHY_SECONDS
        while (status := _docker("inspect", "--format", "{{.State.Health.Status}}", container).stdout.strip()) != (
            "healthy"
        ):
            assert status in ("starting", ""), f"{status}:\n{_docker('logs', container).stdout}"
            assert time.monotonic() < deadline, f"never healthy:\n{_docker('logs', container).stdout}"
            time.sleep(1)
        assert _docker("exec", container, "id", "-u").stdout.strip() != "0"
        assert _docker("stop", "--time", str(int(STOP_SECONDS)), container, timeout=STOP_SECONDS + 30).returncode == 0
        assert _docker("inspect", "--format", "{{.State.ExitCode}}", container).stdout.strip() == "0"
    finally:
        if container:
            _docker("rm", "--force", container)
        _docker("rmi", "--force", tag)
