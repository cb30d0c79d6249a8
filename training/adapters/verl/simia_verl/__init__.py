"""simia-verl: simia episodes as a verl agent loop, rewarded by simia's judge.

`simia_verl.agent_loop.SimiaAgentLoop` is registered as `simia_agent` (import it, or name it in the agent-loop
YAML that `python -m simia_verl.dataset` writes beside the dataset); the rows' `agent_name` picks it. This module
imports nothing heavy: the loop's module imports verl.
"""

__all__ = ["AGENT_NAME"]

AGENT_NAME = "simia_agent"
"""The agent loop's name: the dataset rows' `agent_name`."""
