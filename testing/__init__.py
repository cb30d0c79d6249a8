"""Test doubles for simia, public so users can test their own code against simia without a model provider.

- `FakeProvider`: a fake OpenAI chat-completions / Anthropic messages server over real HTTP, with
  scripted replies (status, body, headers, delay) or an answer function, and a seeded chaos mode of provider
  faults (`Chaos`) (`python -m simia.testing.fake_provider --port P` runs one until killed).
- `schema_answer` / `schema_instance`: a schema-valid instance of any JSON Schema (seeded), and the fake
  provider's answer function built on it, which answers any world's simulator requests offline
  (`python -m simia.testing.fake_provider --port P --answer schema`).
- `offline_answer(mode)`: what `python -m simia.testing.fake_provider --answer MODE` answers: every kind of request
  simia sends (simulator, agent, user, judge, bootstrap) with an answer simia accepts (`simia.testing.fake_answers`).
- `mock_world_answer`: a flawless rule-based simulator of the bundled `mock` world, for
  `FunctionBackend(mock_world_answer)`.
- `simia.testing.replicas.Replicas` (a submodule: it runs Postgres and HAProxy binaries): Postgres, N
  `simia serve` replicas and HAProxy in front, as processes a test can kill and restart;
  `simia.testing.processes` waits for a server process to answer and stops one;
  `simia.testing.postgres.PostgresCluster` runs a throwaway Postgres from its binaries.

The scripted backend (`scripted:FILE`, `simia.sim.backends.scripted`) is a real backend, not a double:
it stays among the backends.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .fake_answers import offline_answer
    from .fake_provider import FAULTS, Chaos, FakeProvider, FakeReply
    from .mock_world import mock_world_answer, parse_simulator_prompt
    from .schema_instances import schema_answer, schema_instance

__all__ = [
    "FAULTS",
    "Chaos",
    "FakeProvider",
    "FakeReply",
    "mock_world_answer",
    "offline_answer",
    "parse_simulator_prompt",
    "schema_answer",
    "schema_instance",
]
_HOMES = {"mock_world_answer": "mock_world", "parse_simulator_prompt": "mock_world"}
_HOMES |= {"schema_answer": "schema_instances", "schema_instance": "schema_instances"}
_HOMES |= {"offline_answer": "fake_answers"}


def __getattr__(name: str) -> Any:
    """The names above, imported on first use: `python -m simia.testing.fake_provider` then runs a module the
    package has not imported already (which Python warns about, as a RuntimeWarning)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES.get(name, 'fake_provider')}", __name__), name)
