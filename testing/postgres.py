"""A throwaway Postgres cluster for tests and benchmarks, started from the machine's own binaries.

`PostgresCluster` runs `initdb`, `pg_ctl` and `postgres` (from PATH, else Debian's
/usr/lib/postgresql/NN/bin) in a temporary folder, on a free 127.0.0.1 port, with
its unix socket in that folder too, and password authentication over TCP. Postgres
refuses to run as root, so as root the binaries run as an unprivileged OS user
(`runuser -u simia-pg --`, created when missing). `create_database` makes a fresh,
empty database cheaply (one cluster per test session, one database per test).

    with PostgresCluster() as cluster:
        url = cluster.create_database()   # postgresql://simia:PASSWORD@127.0.0.1:PORT/simia_1
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
import tempfile
from itertools import count
from pathlib import Path
from types import TracebackType

import psycopg
from simia.server.inprocess import free_port

__all__ = ["PostgresCluster", "postgres_bin"]

OS_USER = "simia-pg"
"""The unprivileged OS user the cluster runs as when simia's tests run as root."""
DB_USER = "simia"


def postgres_bin(name: str) -> str:
    """The path of Postgres binary `name` (`initdb`, `pg_ctl`, ...), on PATH or under /usr/lib/postgresql/*/bin.

    Raises:
        FileNotFoundError: Postgres is not installed (`apt-get install -y postgresql`; `make install` does it).
    """
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True):
        return candidate
    raise FileNotFoundError(f"no Postgres {name} on PATH or under /usr/lib/postgresql; apt-get install -y postgresql")


def _ensure_os_user() -> None:
    if subprocess.run(["id", "-u", OS_USER], capture_output=True).returncode != 0:
        added = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OS_USER], capture_output=True
        )
        if added.returncode not in (0, 9):  # 9: it exists (another test worker added it meanwhile)
            raise RuntimeError(f"useradd {OS_USER} failed ({added.returncode}): {added.stderr.decode().strip()}")


class PostgresCluster:
    """A Postgres cluster in a temporary folder, removed on `close` (or leaving the `with` block).

    Args:
        durable: keep fsync on (benchmarks comparing commit costs). Off by default, which is faster and
            still keeps every acknowledged commit through a killed or restarted server (each commit's WAL
            reaches the OS before it returns); only an OS crash would lose some.
    """

    def __init__(self, *, durable: bool = False) -> None:
        self.durable = durable
        self.password = secrets.token_urlsafe(12)
        self.port = free_port()
        self._names = count(1)
        self._as_root = os.geteuid() == 0
        if self._as_root:
            _ensure_os_user()
        self.root = Path(tempfile.mkdtemp(prefix="simia-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.running = False
        try:
            if self._as_root:
                shutil.chown(self.root, OS_USER, OS_USER)
            pwfile = self.root / "pw"
            pwfile.write_text(self.password + "\n")
            if self._as_root:
                shutil.chown(pwfile, OS_USER, OS_USER)
            self._run(
                postgres_bin("initdb"),
                "-D", str(self.data), "-U", DB_USER, "--pwfile", str(pwfile), "-E", "UTF8", "--no-sync",
                "--auth-local=trust", "--auth-host=scram-sha-256",
            )  # fmt: skip
            pwfile.unlink()
            self.start()
        except BaseException:
            self.close()
            raise

    def _run(self, *argv: str) -> None:
        command = ["runuser", "-u", OS_USER, "--", *argv] if self._as_root else list(argv)
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{Path(argv[0]).name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")

    def start(self) -> None:
        """Start the server (again, after `stop`: same port, same data) and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=300"
        if not self.durable:
            options += " -c fsync=off -c full_page_writes=off"
        self._run(postgres_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`mode`: smart, fast or immediate; the data stays for `start`)."""
        if self.running:
            self.running = False
            self._run(postgres_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def url(self, database: str = "postgres", *, password: str | None = None, local: bool = False) -> str:
        """The URL of `database` in this cluster (`password`: another one, to test refusals).

        With `local`, the URL reaches the server through its Unix socket (libpq's `host=` a folder), as clients
        on the database's own machine do: cheaper per statement than TCP on 127.0.0.1, and trusted (no password).
        """
        if local:
            return f"postgresql://{DB_USER}@/{database}?host={self.root}&port={self.port}"
        secret = self.password if password is None else password
        return f"postgresql://{DB_USER}:{secret}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None, *, local: bool = False) -> str:
        """Create an empty database (default: a new name) and return its URL (`url`)."""
        name = name or f"simia_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name, local=local)

    def close(self) -> None:
        """Stop the server and remove its folder; idempotent."""
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresCluster:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
