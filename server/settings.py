"""The server's settings: one typed object, built by the CLI from flags (environment read only there).

Bearer tokens come in two forms, and no secret can be misread as the other:

- a plain token (`simia serve --token SECRET`, `ServerSettings(tokens=...)`) is the secret byte for
  byte, whatever characters it holds (`=`, `:`, `@` and `/` included, as in base64 or URL-safe
  secrets); its principal is `token-` and a hash prefix of the secret;
- a named token (`simia serve --token-for NAME=SECRET`, `ServerSettings(named_tokens=...)`) names its
  principal. A NAME is letters, digits, `_`, `.` and `-`, never `=`, so the first `=` ends it and all
  that follows is the secret, `=` included. The name gets its own flag rather than a prefix inside
  `--token`, because any prefix syntax (`NAME=`, `NAME:`, `NAME@`) is also a valid secret.

A presented token is checked against every configured secret with `hmac.compare_digest` over SHA-256
digests, so neither which secret matched nor a secret's length shows in the timing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field

__all__ = ["ServerSettings", "parse_named_token", "principal_for_token"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def principal_for_token(token: str) -> str:
    """The principal a plain token stands for: `token-` and the first 12 hex digits of its SHA-256."""
    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:12]


def parse_named_token(text: str) -> tuple[str, str]:
    """Split a `NAME=SECRET` named token at its first `=` (a name never holds one).

    Returns:
        (name, secret); the secret keeps every character after the first `=`.

    Raises:
        ValueError: no `=`, a bad name, or an empty secret; the message says the expected form.
    """
    name, sep, secret = text.partition("=")
    if not sep or not secret:
        raise ValueError(f"expected NAME=SECRET, got {_masked(text)}; a token without a name goes to --token")
    if not _NAME.fullmatch(name):
        raise ValueError(f"bad principal name {name!r} in --token-for: use letters, digits, '_', '.' or '-' (up to 64)")
    return name, secret


def _masked(text: str) -> str:
    """A token for an error message: enough to recognise it, not enough to use it."""
    return repr(text[:4] + "..." if len(text) > 8 else "...")


def _check_secret(secret: str) -> None:
    if not secret:
        raise ValueError("a bearer token cannot be empty")
    if secret != secret.strip() or _CONTROL.search(secret):
        raise ValueError(
            f"bearer token {_masked(secret)} has surrounding spaces or control characters; "
            "an Authorization header cannot carry them, so no request could match it"
        )


@dataclass
class ServerSettings:
    """How `simia serve` behaves.

    Attributes:
        host, port: where to listen (127.0.0.1 by default: nothing outside the machine).
        tokens: plain bearer tokens, each taken verbatim; its principal is a hash of it.
        named_tokens: (principal name, secret) pairs; a name may have several secrets (rotation).
            With any token of either kind, every request but `/healthz` needs one, and episodes
            belong to the principal of the token that created them.
        allowed_hosts, allowed_origins: DNS-rebinding protection (bad Host -> 421, bad Origin -> 403);
            empty means the defaults for `host:port`.
        max_argument_bytes: tool arguments above this are refused before any model call.
        max_calls_per_episode, max_sim_tokens_per_episode: per-episode budgets (denial of wallet).
        idle_timeout: seconds without a call after which an active episode is marked abandoned.
        max_live_episodes: cap on active episodes; creating more answers 503.
        max_live_episodes_per_principal: cap on one principal's active episodes; creating more answers 429.
        max_sessions: cap on open handshake-era MCP sessions per endpoint kind, and on ORS sessions.
        max_sessions_per_principal: cap on one principal's ORS sessions, and on its OpenEnv sessions: over it (or
            over the server's cap) only its own idle sessions make room (`simia.server.sessions`), else 429.
        max_failed_logins: how many wrong bearer tokens one client address may send in 60 s before each further one
            is a 429 with Retry-After (a correct token is never slowed).
        max_transcript_bytes: the most bytes (as JSON) of a transcript posted to end an episode, on every protocol;
            over it the end is refused (413) before the judge reads anything.
        ws_idle_timeout: seconds an OpenEnv WebSocket may stay silent before the server closes it (its episode
            is ended as closing the socket ends it); a socket whose episode the idle sweep abandoned closes at once.
        header_timeout: seconds a client may take to send a request's headers, on every listener; past it the
            connection is closed (a client trickling headers holds no connection).
        body_timeout: seconds a client may leave a request body without sending more of it; past it the request
            is answered 408 and the connection closed.
        max_real_sessions: cap on open sessions with worlds' real servers (one per episode that called a tool
            routed `real`; a command server is a process each); past it, such a call fails until an episode ends.
        public_url: the base URL put in `mcp_url` (default: the request's own base URL).
        ors_port: where the Open Reward Standard listener serves the worlds (`simia serve --ors-port`; same host,
            auth and store), or None for none.
        tune_gc: once serving, freeze the startup heap and collect less often (`simia serve` sets it;
            left off for apps embedded in other processes, such as tests).

    Raises:
        ValueError: an empty token, one with surrounding spaces or control characters, a bad
            principal name, or one secret given to two different principals.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    tokens: tuple[str, ...] = field(default=(), repr=False)
    named_tokens: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    max_argument_bytes: int = 32_768
    max_calls_per_episode: int = 500
    max_sim_tokens_per_episode: int = 2_000_000
    idle_timeout: float = 1800.0
    max_live_episodes: int = 10_000
    max_sessions: int = 10_000
    max_sessions_per_principal: int = 2_500
    max_live_episodes_per_principal: int = 5_000
    max_real_sessions: int = 64
    max_failed_logins: int = 5
    max_transcript_bytes: int = 1_000_000
    ws_idle_timeout: float = 600.0
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    public_url: str | None = None
    ors_port: int | None = None
    tune_gc: bool = False
    _credentials: tuple[tuple[bytes, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        owners: dict[str, str] = {}
        for name, secret in self.named_tokens:
            if not _NAME.fullmatch(name):
                raise ValueError(f"bad principal name {name!r}: use letters, digits, '_', '.' or '-' (up to 64)")
            _check_secret(secret)
            if owners.setdefault(secret, name) != name:
                raise ValueError(f"one secret is given to two principals, {owners[secret]!r} and {name!r}")
        for secret in self.tokens:
            _check_secret(secret)
            principal = principal_for_token(secret)
            if owners.setdefault(secret, principal) != principal:
                raise ValueError(f"a plain token is also the secret of principal {owners[secret]!r}")
        self._credentials = tuple((hashlib.sha256(s.encode()).digest(), p) for s, p in owners.items())

    @property
    def requires_token(self) -> bool:
        """Whether requests need a bearer token (any plain or named token is configured)."""
        return bool(self._credentials)

    def principal_for(self, token: str | bytes) -> str | None:
        """The principal of a presented bearer token, or None when it matches no configured one.

        Compares in constant time against every configured secret: no early exit, and the
        digests compared have one length whatever the secrets' lengths.

        Args:
            token: the token as sent; bytes are taken as is (the header's own bytes), text as UTF-8.
        """
        digest = hashlib.sha256(token if isinstance(token, bytes) else token.encode()).digest()
        found: str | None = None
        for secret_digest, principal in self._credentials:
            if hmac.compare_digest(digest, secret_digest):
                found = principal
        return found

    def hosts(self) -> list[str]:
        if self.allowed_hosts:
            return list(self.allowed_hosts)
        hosts = {f"{self.host}:{self.port}", f"{self.host}:*", "127.0.0.1:*", "localhost:*", "[::1]:*"}
        return sorted(hosts)

    def origins(self) -> list[str]:
        if self.allowed_origins:
            return list(self.allowed_origins)
        return sorted({f"http://{self.host}:*", "http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"})
