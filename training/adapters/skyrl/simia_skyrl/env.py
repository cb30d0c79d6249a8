"""A simia episode as a SkyRL gym environment: one `SimiaTextEnv` per trajectory, text in, text out.

`init` creates the episode of the row's task (or forks the row's `fork_of` episode: a GRPO group starts from one
snapshot); each `step` parses the model's turn for tool calls (Hermes `<tool_call>` blocks or OpenAI-style JSON),
runs them on the episode and returns their results as the next observations; a turn without a call is the
model's answer, so the episode is ended with the transcript and judged, and the reward is the verdict's training
reward. A call that does not parse, an unknown tool and bad arguments are observations the model reads, never
exceptions.

Step rewards: for a task with checks, each tool result's `_meta` carries the call's shaped reward (`simia/reward`,
the progress its state change made on the task's checks) and the progress after it (`simia/progress`); a step's
reward is the sum of its calls' shaped rewards (0.0 for a task without checks), and the last step's adds the
outcome. With the judge's gamma 1 a trajectory's step rewards sum to its progress at the end minus at the start.

SkyRL's rewards are floats, with no way to drop a sample from inside an environment: an episode whose verdict is
masked (a judge error, an infrastructure failure, a fabricated transcript) gets reward 0.0 with
`metadata["simia_masked"] = True` and the verdict's reasons, and a warning in the log.

Configuration: the row's fields (`world`, `task`, `seed`, `server`, `fork_of`; `python -m simia_skyrl.dataset`
writes them) and SkyRL's `environment.skyrl_gym.simia` config (`server`, `token`, `perturbation`), which wins
over the row; `max_turns` comes from SkyRL's generator.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf
from simia_env_client import EnvClient, Rollout, Turn
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

__all__ = ["ENV_ID", "SimiaTextEnv", "register"]

ENV_ID = "simia"
"""The id `register()` gives the environment (the dataset's `env_class`)."""

log = logging.getLogger("simia_skyrl")
META_REWARD, META_PROGRESS = "simia/reward", "simia/progress"
"""The `_meta` keys of a call's shaped reward and of the progress after it (simia's `simia.sim.wire`)."""


def register(env_id: str = ENV_ID) -> None:
    """Register `SimiaTextEnv` with skyrl_gym as `env_id` (once; call it where SkyRL's workers start, as SkyRL's
    own entry points register their environments)."""
    from skyrl_gym.envs import register as skyrl_register
    from skyrl_gym.envs.registration import registry

    if env_id not in registry:
        skyrl_register(id=env_id, entry_point="simia_skyrl.env:SimiaTextEnv")


def _setting(config: Any, extras: Mapping[str, Any], key: str) -> Any:
    """`key` from SkyRL's env config (a dict or an OmegaConf node, made plain for JSON), else from the row."""
    value = config.get(key) if config is not None and hasattr(config, "get") else None
    value = value if value is not None else extras.get(key)
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def _observation(message: Mapping[str, Any]) -> dict[str, str]:
    """A tool result as SkyRL's environments show one: a user turn in `<tool_response>` tags (any chat template
    renders it)."""
    return {"role": "user", "content": f"<tool_response>\n{message['content']}\n</tool_response>"}


class SimiaTextEnv(BaseTextEnv):  # type: ignore[misc]  # skyrl_gym ships no type information
    """One simia episode, driven by the model's text turns.

    Args:
        env_config: SkyRL's `environment.skyrl_gym.simia` config: `server` (the simia URL), `token`,
            `perturbation` (`{"rate", "kinds"}`: injected faults, replayed by seed).
        extras: the dataset row's other fields: `world`, `task`, and optionally `seed`, `server`, `fork_of`;
            `max_turns` (SkyRL's generator sets it; default 10).
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        extras = dict(extras or {})
        server = _setting(env_config, extras, "server")
        if not server or "world" not in extras or "task" not in extras:
            raise ValueError(
                "SimiaTextEnv needs a `server` (environment.skyrl_gym.simia.server, or the row's), and the row's "
                "`world` and `task`: build the dataset with `python -m simia_skyrl.dataset --server URL --world W`"
            )
        self.server = str(server)
        self.token = _setting(env_config, extras, "token")
        self.perturbation = _setting(env_config, extras, "perturbation")
        self.world, self.task = str(extras["world"]), str(extras["task"])
        self.seed = extras.get("seed")
        self.fork_of = extras.get("fork_of")
        self.max_turns = int(extras.get("max_turns") or 10)
        self.client: EnvClient | None = None
        self.rollout: Rollout | None = None
        self.reward: float | None = None
        self.shaped = 0.0

    def init(self, prompt: ConversationType | str) -> tuple[ConversationType, dict[str, Any]]:
        """Create the episode (or fork it); the prompt (the dataset's messages) is what the model sees first."""
        messages = json.loads(prompt) if isinstance(prompt, str) else list(prompt)
        self.client = EnvClient(self.server, token=self.token)
        if self.fork_of:
            episode = self.client.fork(str(self.fork_of))
        else:
            seed = None if self.seed is None or self.seed != self.seed else int(self.seed)  # NaN: pandas' None
            episode = self.client.create(self.world, self.task, seed, perturbation=self.perturbation)
        self.rollout = Rollout(self.client, episode, messages)
        return messages, {"episode": episode.id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Run the model's turn; end and judge the episode when it answers without a call or runs out of turns."""
        if self.rollout is None:
            raise RuntimeError("call init(prompt) before step(action): init creates the simia episode")
        self.turns += 1
        turn = self.rollout.act(action)
        metadata: dict[str, Any] = _turn_metadata(turn)
        shaped = sum(float(_meta(r.raw).get(META_REWARD) or 0.0) for r in turn.results)
        self.shaped += shaped
        if not turn.done and self.turns < self.max_turns:
            observations = [_observation(o) for o in turn.observations]
            return BaseTextEnvStepOutput(observations=observations, reward=shaped, done=False, metadata=metadata)
        ended = self.rollout.finish()
        self.reward = ended.training_reward
        metadata.update(
            simia_episode=ended.id, simia_reward=ended.reward, simia_masked=ended.training_reward is None
        )  # fmt: skip
        if ended.training_reward is None:
            metadata["simia_reasons"] = list(ended.verdict.get("reasons") or [])
            log.warning("simia episode %s: reward masked (%s); reported as 0.0", ended.id, metadata["simia_reasons"])
        reward = 0.0 if ended.training_reward is None else ended.training_reward
        return BaseTextEnvStepOutput(observations=[], reward=reward + shaped, done=True, metadata=metadata)

    def close(self) -> None:
        """End the episode if SkyRL stopped the trajectory first (a length limit), so none is left open."""
        if self.client is None:
            return
        try:
            if self.rollout is not None and self.rollout.ended is None:
                self.rollout.finish()
        except Exception as exc:  # closing must not fail the trajectory; the server marks it abandoned later
            episode = self.rollout.episode.id if self.rollout is not None else None
            log.warning("simia episode %s could not be ended on close: %s", episode, exc)
        finally:
            self.client.close()
            self.client = None

    def get_metrics(self) -> dict[str, Any]:
        masked = self.rollout is not None and self.rollout.ended is not None and self.reward is None
        return {"turns": self.turns, "reward": self.reward or 0.0, "shaped_reward": self.shaped, "masked": int(masked)}


def _meta(result: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = result.get("_meta")
    return meta if isinstance(meta, Mapping) else {}


def _turn_metadata(turn: Turn) -> dict[str, Any]:
    """What the turn did; `progress` is the task's progress after its last call (None without checks or calls)."""
    progress = [_meta(r.raw)[META_PROGRESS] for r in turn.results if _meta(r.raw).get(META_PROGRESS) is not None]
    return {
        "tool_calls": [c.name for c in turn.parsed.calls],
        "tool_errors": sum(1 for r in turn.results if r.is_error),
        "parse_problems": [p.message for p in turn.parsed.problems],
        "progress": progress[-1] if progress else None,
    }
