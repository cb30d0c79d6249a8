"""The errors `simia.sim` raises, and which side of the boundary each belongs to.

    SimiaError
    ├── WorldError            a world folder is invalid (carries every WorldIssue found)
    ├── UnknownWorldError     a world name that is not loaded
    ├── StateError            a state patch does not apply or breaks the state schema
    ├── ExpressionError       a declaration's JSONata expression does not parse, fails or runs past its bounds
    ├── StoreConfigError      a --db target no store implementation opens
    │   └── StoreSchemaError      a database of a newer schema than this simia's, or not simia's
    ├── StoreConflict         an episode moved on since the caller read it (another replica committed)
    ├── StoreUnavailable      the database stopped answering or refused a write (down, disk full, read-only)
    ├── WorldExistsError      a world folder is already there (pass force to replace it)
    ├── ImportSourceError     an MCP server or API description that cannot become a world
    │   ├── UnsupportedSchema     one operation's schema has no tool-schema form (the importer skips it)
    │   └── SchemaTooLarge        one operation's schema is too large once its $refs are inlined (skipped)
    ├── GradeError            the step grader failed or did not answer with a grade (`simia fidelity`)
    └── BackendError          the model backend failed (infrastructure, never the agent's fault)
        ├── BackendConfigError    unknown SPEC, missing API key, missing extra
        ├── BackendTimeout        the per-call deadline passed
        ├── BackendUnavailable    connection errors, 429 and 5xx after all retries
        ├── BackendRejected       a 4xx that retrying cannot fix (context length, bad request)
        └── BackendOutputError    the model answered, but not with what the schema asks for

The other layers extend the tree: `simia.server.errors.ApiError` (an HTTP error answer),
`simia.server.real_tools.RealServerFailed`, `simia.clients.api.SimiaApiError` and
`simia.cli._common.CliError` are SimiaErrors too. `simia.sim.backends.Retryable` is a signal inside a
backend, never raised out of `Backend.complete`.

Agent mistakes (bad arguments, unknown tools, simulated tool errors) are not
exceptions: they are data in a `Step` with `error_kind="agent"`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BackendConfigError",
    "BackendError",
    "BackendOutputError",
    "BackendRejected",
    "BackendTimeout",
    "BackendUnavailable",
    "ExpressionError",
    "GradeError",
    "ImportSourceError",
    "SchemaTooLarge",
    "SimiaError",
    "StateError",
    "StoreConfigError",
    "StoreConflict",
    "StoreSchemaError",
    "StoreUnavailable",
    "UnknownWorldError",
    "UnsupportedSchema",
    "WorldError",
    "WorldExistsError",
    "WorldIssue",
]


class SimiaError(Exception):
    """Base of every error simia raises on purpose."""


@dataclass(frozen=True)
class WorldIssue:
    """One problem in a world folder: where it is, what is wrong, how to fix it."""

    file: str
    path: str
    message: str
    hint: str = ""
    line: int | None = None

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line is not None else "")
        text = f"{where}: {self.path or '<root>'}: {self.message}"
        return f"{text} (hint: {self.hint})" if self.hint else text


class WorldError(SimiaError):
    """A world failed validation; `issues` lists every problem found, not only the first."""

    def __init__(self, world: str, issues: list[WorldIssue], source: str = "") -> None:
        self.world = world
        self.issues = issues
        self.source = source
        where = f" ({source})" if source else ""
        lines = "\n".join(f"  - {issue}" for issue in issues)
        super().__init__(f"world {world!r}{where} is invalid ({len(issues)} problem(s)):\n{lines}")


class UnknownWorldError(SimiaError):
    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"unknown world {name!r}; loaded worlds: {', '.join(sorted(known)) or '(none)'}")


class ExpressionError(SimiaError):
    """A declaration's JSONata expression does not parse, fails (a type error, a division by zero), or runs past
    its bounds (`simia.sim.world.expressions`); the message says which and where."""


class StateError(SimiaError):
    """A state patch could not be applied, or the patched state breaks `state_schema`."""


class StoreConfigError(SimiaError):
    """A database target no store opens: an unknown URL scheme, an unreachable or misconfigured database.
    The message is one line and never contains a password."""


class StoreSchemaError(StoreConfigError):
    """The database was written by a newer simia, or is not simia's; nothing was written to it."""


class StoreConflict(SimiaError):
    """A commit found its episode moved on (another replica committed a call, or ended it) since the caller
    read it; nothing was written, and the caller reloads the episode and tries again."""


class StoreUnavailable(SimiaError):
    """The database did not answer an operation (down, restarting, unreachable, no free connection in time), or
    refused a transaction it would accept on a healthy disk (full, read-only, an I/O error, locked by another
    process). Infrastructure, never the caller's fault. Postgres: whether a write in flight was committed is
    unknown until the episode is read again. SQLite: the refused transaction was rolled back whole, nothing
    of it is stored. Either way the same request succeeds once the database is healthy again."""


class WorldExistsError(SimiaError):
    """A world would be written where a folder already is; nothing is overwritten without `force`."""


class ImportSourceError(SimiaError):
    """An MCP server or API description cannot become a world: unreachable, not OpenAPI, nothing importable.
    The message is one line that says what is wrong and what to do."""


class BackendError(SimiaError):
    """The simulator's model backend failed. Always an infrastructure failure."""


class BackendConfigError(BackendError):
    """A backend cannot be built: unknown SPEC, missing key, missing optional dependency."""


class BackendTimeout(BackendError):
    """The per-call deadline passed before the backend answered."""


class BackendUnavailable(BackendError):
    """The backend kept failing with retryable errors (connection, 429, 5xx) until retries ran out."""


class BackendRejected(BackendError):
    """The backend refused the request with a non-retryable 4xx (bad request, context too long)."""


class BackendOutputError(BackendError):
    """The backend answered but its output is not valid JSON for the requested schema."""


class UnsupportedSchema(ImportSourceError):
    """A schema simia cannot express as a tool schema (e.g. Swagger's `type: file`): the operation is skipped."""


class SchemaTooLarge(ImportSourceError):
    """Inlining every `$ref` made the schema larger than the converter's node budget: the operation is skipped."""


class GradeError(SimiaError):
    """The step grader failed (its backend, after retries) or answered something that is not a grade."""
