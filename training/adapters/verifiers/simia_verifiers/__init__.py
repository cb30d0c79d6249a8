"""simia's worlds as a verifiers v1 environment: `vf-eval simia-verifiers` runs a world's tasks, one simia episode
per rollout, its tools proxied to the episode's MCP URL and its reward the judge's verdict."""

from simia_verifiers.taskset import SimiaConfig, SimiaData, SimiaTask, SimiaTaskConfig, SimiaTaskset

__all__ = ["SimiaConfig", "SimiaData", "SimiaTask", "SimiaTaskConfig", "SimiaTaskset"]
