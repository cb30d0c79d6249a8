"""The state one rollout shares between its task (which opens and ends the simia episode) and the tool server
(which proxies the agent's calls to the episode), and the client both reach simia with."""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field
from simia_env_client import AsyncEnvClient, Episode
from verifiers.v1 import State

__all__ = ["SimiaState"]


class SimiaState(State):
    """Attributes:
    server: simia's base URL. token_var: the environment variable holding its bearer token (the token itself is
    never stored here: the state travels between processes). episode: the rollout's episode, as created.
    tool_names: the world's tools as listed to the agent (a harness may prefix them; the transcript names them as
    simia does).
    """

    server: str = ""
    token_var: str = "SIMIA_TOKEN"
    request_timeout: float = 600.0
    episode: dict[str, Any] = Field(default_factory=dict)
    tool_names: list[str] = Field(default_factory=list)

    def client(self) -> AsyncEnvClient:
        """A client of simia (close it: `async with state.client() as client`)."""
        token = os.environ.get(self.token_var) or None
        return AsyncEnvClient(self.server, token=token, timeout=self.request_timeout)

    @property
    def simia_episode(self) -> Episode:
        if not self.episode:
            raise RuntimeError("this rollout has no simia episode (its task's setup did not run)")
        return Episode.of(self.episode)
