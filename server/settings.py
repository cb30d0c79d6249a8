"""The server's settings: one typed object, built by the CLI from flags (environment read only there)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

__all__ = ["ServerSettings", "principal_for_token"]


def principal_for_token(token: str) -> str:
    """The principal a bearer token stands for: `NAME` for a `NAME=SECRET` token, else a hash of it."""
    name, sep, _ = token.partition("=")
    if sep and name:
        return name
    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:12]


@dataclass
class ServerSettings:
    """How `simia serve` behaves.

    Attributes:
        host, port: where to listen (127.0.0.1 by default: nothing outside the machine).
        tokens: bearer tokens; with any, every request needs one, and episodes belong to
            the principal of the token that created them. A token `NAME=SECRET` names its principal.
        allowed_hosts, allowed_origins: DNS-rebinding protection (bad Host -> 421, bad Origin -> 403);
            empty means the defaults for `host:port`.
        max_argument_bytes: tool arguments above this are refused before any model call.
        max_calls_per_episode, max_sim_tokens_per_episode: per-episode budgets (denial of wallet).
        idle_timeout: seconds without a call after which an active episode is marked abandoned.
        max_live_episodes: cap on active episodes; creating more answers 503.
        max_sessions: cap on open handshake-era MCP sessions per endpoint kind.
        public_url: the base URL put in `mcp_url` (default: the request's own base URL).
        tune_gc: once serving, freeze the startup heap and collect less often (`simia serve` sets it;
            left off for apps embedded in other processes, such as tests).
    """

    host: str = "127.0.0.1"
    port: int = 8765
    tokens: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    max_argument_bytes: int = 32_768
    max_calls_per_episode: int = 500
    max_sim_tokens_per_episode: int = 2_000_000
    idle_timeout: float = 1800.0
    max_live_episodes: int = 10_000
    max_sessions: int = 10_000
    public_url: str | None = None
    tune_gc: bool = False
    principals: dict[str, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.principals = {token.partition("=")[2] or token: principal_for_token(token) for token in self.tokens}

    def hosts(self) -> list[str]:
        if self.allowed_hosts:
            return list(self.allowed_hosts)
        hosts = {f"{self.host}:{self.port}", f"{self.host}:*", "127.0.0.1:*", "localhost:*", "[::1]:*"}
        return sorted(hosts)

    def origins(self) -> list[str]:
        if self.allowed_origins:
            return list(self.allowed_origins)
        return sorted({f"http://{self.host}:*", "http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"})
