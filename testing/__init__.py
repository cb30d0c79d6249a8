"""Test doubles for simia, public so users can test their own code against simia without a model provider.

- `FakeProvider`: a fake OpenAI chat-completions / Anthropic messages server over real HTTP, with
  scripted replies (status, body, headers, delay) or an answer function, and a seeded chaos mode of provider
  faults (`Chaos`) (`python -m simia.testing.fake_provider --port P` runs one until killed).
- `mock_world_answer`: a flawless rule-based simulator of the bundled `mock` world, for
  `FunctionBackend(mock_world_answer)`.
- `simia.testing.replicas.Replicas` (a submodule: it runs Postgres and HAProxy binaries): Postgres, N
  `simia serve` replicas and HAProxy in front, as processes a test can kill and restart;
  `simia.testing.processes` waits for a server process to answer and stops one;
  `simia.testing.postgres.PostgresCluster` runs a throwaway Postgres from its binaries.

The scripted backend (`scripted:FILE`, `simia.sim.backends.scripted`) is a real backend, not a double:
it stays among the backends.
"""

from .fake_provider import FAULTS, Chaos, FakeProvider, FakeReply
from .mock_world import mock_world_answer, parse_simulator_prompt

__all__ = ["FAULTS", "Chaos", "FakeProvider", "FakeReply", "mock_world_answer", "parse_simulator_prompt"]
