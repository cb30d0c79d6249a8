"""Several `simia serve` replicas on one Postgres database behind a real load balancer (HAProxy), as processes.

`Replicas` starts what a multi-replica deployment is made of, each as a real subprocess in a
temporary folder: a throwaway Postgres cluster (`PostgresCluster`, unless a database URL is
given), optionally a fake model provider, N `simia serve --db postgresql://...` replicas, and
HAProxy doing round robin over them with a generated config. Tests and `bench/replicas.py` use it
to kill a replica (`kill`), bring it back (`restart`) and restart Postgres under load.

    async with Replicas(replicas=2, provider_latency=0.02) as deployment:
        deployment.url          # the balancer: POST {url}/v1/episodes, then MCP on the episode's mcp_url
        deployment.kill(0)      # SIGKILL replica 0; the balancer routes around it
        await deployment.restart(0)

What the balancer does (`haproxy_config`): round robin (or, with `balance="uri"`, a consistent hash
of the path: each episode to one replica while it is up); a replica that refuses a connection or
fails its `/healthz` check is taken out (passively on the first refused connection, actively
by the check every 250 ms) and put back when its check passes. A request is retried on another
replica only when it could not be sent at all (`retry-on conn-failure`, the default): a tool call
is not idempotent, so a request that reached a replica that then died is answered 502 (or its
connection is cut) and left to the client, which retries it with the same JSON-RPC id (simia
answers such a retry with the committed result if the first attempt was committed). Each answer carries the replica that
served it (`X-Simia-Replica: r0`). With `sticky=True` the balancer pins each handshake-era MCP
session (`Mcp-Session-Id`, learnt from the answer that created it) to the replica that holds
it; episode URLs need no stickiness.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

import httpx2 as httpx
from simia.server.inprocess import free_port
from simia.testing.postgres import PostgresCluster
from simia.testing.processes import ServeProcess, wait_answering

__all__ = ["Replica", "Replicas", "haproxy_bin", "haproxy_config"]

ROOT = Path(__file__).resolve().parents[1]
"""The source tree (for the bundled worlds)."""


def haproxy_bin() -> str:
    """The path of `haproxy`.

    Raises:
        FileNotFoundError: HAProxy is not installed (`apt-get install -y haproxy`; `make install` does it).
    """
    found = shutil.which("haproxy", path=f"{os.environ.get('PATH', '')}:/usr/sbin")
    if found is None:
        raise FileNotFoundError("no haproxy on PATH or in /usr/sbin; apt-get install -y haproxy")
    return found


def haproxy_config(
    port: int, servers: list[str], *, bind: str = "127.0.0.1", sticky: bool = False, balance: str = "roundrobin"
) -> str:
    """An HAProxy config: listening on `bind`:`port`, over simia replicas at `servers` ("HOST:PORT" each).

    Args:
        sticky: pin handshake-era MCP sessions to the replica that created them (needed for world URLs).
        balance: `roundrobin` (each request to the next replica), or `uri` (a consistent hash of the path:
            each episode URL to one replica while it is up, so replicas rarely race for an episode).
    """
    stick = (
        "    stick-table type string len 128 size 1m expire 1h\n"
        "    stick match req.hdr(mcp-session-id)\n"
        "    stick store-response res.hdr(mcp-session-id)\n"
        if sticky
        else ""
    )
    hash_type = "\n    hash-type consistent" if balance == "uri" else ""
    lines = "".join(f"    server r{i} {address}\n" for i, address in enumerate(servers))
    return f"""\
global
    maxconn 8000
    log stderr format short local0

defaults
    mode http
    log global
    option httplog
    option dontlog-normal  # log only failed requests
    timeout connect 2s
    timeout client 10m
    timeout server 10m
    timeout http-keep-alive 10m
    # retry, on another replica, only requests that could not be sent (a tool call is not idempotent)
    retries 3
    retry-on conn-failure
    option redispatch 1

frontend simia
    bind {bind}:{port}
    default_backend replicas

backend replicas
    balance {balance}{hash_type}
    option httpchk
    http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host 127.0.0.1:{port}
    http-response set-header X-Simia-Replica %[srv_name]
    default-server check inter 250ms fall 2 rise 1 observe layer4 error-limit 1 on-error mark-down maxconn 5000
{stick}{lines}"""


class Replica:
    """One `simia serve` process on `db`, on a fixed port (kept across restarts), logging to `log`."""

    def __init__(self, index: int, db: str, args: list[str], log: Path) -> None:
        self.index = index
        self.log = log
        self.server = ServeProcess(["--db", db, *args], log=log, new_session=True)
        self.port, self.url = self.server.port, self.server.url

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        """The process (the last one, after it exited); None before `start`."""
        return self.server.process if self.server.started else None

    def start(self) -> None:
        """Start the process (again: same port, same database)."""
        self.server.start()

    async def ready(self, timeout: float = 60) -> None:
        """Wait until `/healthz` answers 200.

        Raises:
            RuntimeError: the process exited (its log's tail says why). TimeoutError: not healthy in `timeout` s.
        """
        assert self.server.started, "start the replica first"
        await self.server.healthy(timeout)

    async def calls_served(self) -> int:
        """Tool calls this process has answered since it started (its `/metrics`)."""
        return int(await self.metric("simia_tool_calls_total"))

    async def metric(self, name: str) -> float:
        """The sum of the samples of metric `name` (all labels) in this process's `/metrics`."""
        async with httpx.AsyncClient(timeout=10) as http:
            text = (await http.get(f"{self.url}/metrics")).text
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.split("{")[0].split(" ")[0] == name)

    def kill(self) -> None:
        """SIGKILL the process and reap it."""
        self.server.kill()

    def stop(self) -> None:
        """SIGTERM the process (SIGKILL after 15 s)."""
        self.server.stop()


class Replicas:
    """Postgres, N simia replicas and HAProxy in front, started on `__aenter__` (or `start`), stopped on exit.

    Args:
        replicas: how many `simia serve` processes.
        db: the database (a Postgres URL, or a SQLite path for a baseline); default: a new database in a
            new `PostgresCluster` (then `postgres`).
        backend: the replicas' `--backend` arguments; default: a fake OpenAI-compatible provider process
            (`python -m simia.testing.fake_provider --lean`, the mock world's perfect simulator) answering after
            `provider_latency` seconds.
        serve_args: more `simia serve` arguments for every replica.
        sticky: pin handshake-era MCP sessions to their replica (see the module docstring).
        balance: HAProxy's `balance` (`haproxy_config`).
        balancer: start HAProxy; without it (a baseline: one replica, e.g. on SQLite) `url` is replica 0's.
    """

    def __init__(
        self,
        replicas: int = 2,
        *,
        db: str | None = None,
        backend: list[str] | None = None,
        provider_latency: float = 0.0,
        serve_args: list[str] | None = None,
        sticky: bool = False,
        balance: str = "roundrobin",
        balancer: bool = True,
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="simia-replicas-"))
        self.postgres: PostgresCluster | None = None
        self.db = db or ""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._count = replicas
        self._backend = backend
        self._latency = provider_latency
        self._serve_args = serve_args or []
        self._sticky = sticky
        self._balance = balance
        self._with_balancer = balancer
        self._provider: subprocess.Popen[bytes] | None = None
        self._balancer: subprocess.Popen[bytes] | None = None
        self.replicas: list[Replica] = []

    async def start(self) -> Replicas:
        """Start everything and wait until every replica is healthy and the balancer answers."""
        try:
            if not self.db:
                self.postgres = PostgresCluster()
                self.db = self.postgres.create_database(local=True)  # the replicas run on the database's machine
            backend = self._backend or await self._start_provider()
            args = [
                "--worlds-dir", str(ROOT / "tool_specs"), "--world", "mock", "--log-level", "warning",
                *backend, *self._serve_args,
            ]  # fmt: skip
            if self._with_balancer:
                args += ["--public-url", self.url]
            self.replicas = [Replica(i, self.db, args, self.root / f"r{i}.log") for i in range(self._count)]
            for replica in self.replicas:
                replica.start()
            await asyncio.gather(*(replica.ready() for replica in self.replicas))
            if self._with_balancer:
                await self._start_balancer()
            else:
                self.port, self.url = self.replicas[0].port, self.replicas[0].url
        except BaseException:
            self.close()
            raise
        return self

    async def _start_provider(self) -> list[str]:
        self._provider, url = self._spawn_provider()
        await wait_answering(f"{url}/chat/completions", self._provider, what="the fake provider")
        return ["--backend", "openai-compatible:fake", "--base-url", url, "--backend-concurrency", "100000"]

    def _spawn_provider(self) -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "simia.testing.fake_provider",
            "--port",
            str(port),
            "--latency",
            str(self._latency),
            "--lean",
        ]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return proc, f"http://127.0.0.1:{port}/v1"

    async def _start_balancer(self) -> None:
        self._balancer = self._spawn_balancer()
        await wait_answering(f"{self.url}/healthz", self._balancer, what="haproxy", log=self.root / "haproxy.log")

    def _spawn_balancer(self) -> subprocess.Popen[bytes]:
        config = self.root / "haproxy.cfg"
        config.write_text(
            haproxy_config(
                self.port, [f"127.0.0.1:{r.port}" for r in self.replicas], sticky=self._sticky, balance=self._balance
            )
        )
        check = subprocess.run([haproxy_bin(), "-c", "-q", "-f", str(config)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy refused its config: {check.stderr.strip()}")
        with (self.root / "haproxy.log").open("ab") as log:
            return subprocess.Popen(
                [haproxy_bin(), "-db", "-f", str(config)], stdout=log, stderr=log, start_new_session=True
            )

    def kill(self, index: int) -> None:
        """SIGKILL replica `index` (no shutdown of any kind: in-flight calls are cut off)."""
        self.replicas[index].kill()

    async def restart(self, index: int) -> None:
        """Start replica `index` again and wait until it is healthy (the balancer's check then takes it back)."""
        replica = self.replicas[index]
        replica.start()
        await replica.ready()

    def close(self) -> None:
        """Stop the balancer, the replicas, the provider and Postgres, and remove the folder; idempotent."""
        for proc in (self._balancer, self._provider):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=15)
        for replica in self.replicas:
            replica.stop()
        if self.postgres is not None:
            self.postgres.close()
        shutil.rmtree(self.root, ignore_errors=True)

    async def __aenter__(self) -> Replicas:
        return await self.start()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
