"""A simia episode per sample, as a verl agent loop: `SimiaAgentLoop`, registered as `simia_agent`.

For each dataset row (`python -m simia_verl.dataset` writes them) the loop creates the row's episode, then runs
turns: the policy generates through verl's
`server_manager`, the turn's text is parsed for tool calls (Hermes `<tool_call>` blocks or OpenAI-style JSON), the
calls run on the episode over MCP, and their results are appended as `tool` messages whose tokens are masked out
of the loss (`response_mask` 0). A turn without a call is the policy's answer: the episode is ended with the
transcript and the token data, and `reward_score` is the verdict's training reward, so verl's reward loop is
skipped. The dense rewards of a task with checks go where verl's own tool agent loop puts per-step rewards:
`extra_fields["tool_rewards"]` holds the shaped reward of each call the episode ran (its progress on the task's
checks, from the verdict's progress curve), `extra_fields["turn_scores"]` their sum per policy turn (0 for a
turn without calls), and `extra_fields["simia_progress"]` the progress at the start and the end (empty lists and
None for a task without checks). A call that does not parse, an unknown tool and bad arguments come back as tool
messages the policy reads; nothing that did not run is stored on the episode.

GRPO groups: the samples of one prompt share verl's `uid`; the first sample of a group (in this worker process)
creates the episode and plays it, and the others fork it at step 0, so the group starts from one snapshot and
shares one `group_id` in simia's exports. A row's `extra_info.fork_of` forks that episode instead.

verl has no way to drop a sample from an agent loop: an episode whose verdict is masked (a judge error, an
infrastructure failure, a fabricated transcript) gets `reward_score` 0.0 with every `response_mask` entry 0, so
no token of it is trained on, and `extra_fields["simia_masked"]` True.

Configuration: the row's `extra_info` (`world`, `task`, `seed`, `server`, `fork_of`, `tools_in_prompt`) and the
agent-loop YAML entry's keys (`server`, `token`, `perturbation`), which win; the turn limit is verl's
`actor_rollout_ref.rollout.multi_turn.max_assistant_turns` (10 when unset).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import OrderedDict
from typing import Any, cast
from uuid import uuid4

from omegaconf import OmegaConf
from simia_env_client import AsyncEnvClient, AsyncRollout, Ended, Episode, openai_tools
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from . import AGENT_NAME

__all__ = ["SimiaAgentLoop"]

DEFAULT_TURNS = 10
log = logging.getLogger("simia_verl")
_GROUPS: OrderedDict[tuple[str, str], asyncio.Future[str]] = OrderedDict()
"""(server, verl uid) -> the group's first episode, for this process's agent loops (the most recent 4096 groups)."""


async def _episode(
    client: AsyncEnvClient, extra: dict[str, Any], group: str | None, perturbation: dict[str, Any] | None
) -> Episode:
    """The sample's episode: a fork of `fork_of`, a fork of its group's first episode, or a new one."""
    if extra.get("fork_of"):
        return await client.fork(str(extra["fork_of"]))
    seed = None if extra.get("seed") is None else int(extra["seed"])

    async def create() -> Episode:
        return await client.create(str(extra["world"]), str(extra["task"]), seed, perturbation=perturbation)

    if group is None:
        return await create()
    key = (client.base_url, group)
    head = _GROUPS.get(key)
    if head is not None:
        return await client.fork(await head, step=0)
    _GROUPS[key] = future = asyncio.get_running_loop().create_future()
    while len(_GROUPS) > 4096:
        _GROUPS.popitem(last=False)
    try:
        episode = await create()
    except BaseException as exc:
        _GROUPS.pop(key, None)
        future.set_exception(exc)
        future.exception()  # retrieved: the group's other samples raise it themselves
        raise
    future.set_result(episode.id)
    return episode


@register(AGENT_NAME)
class SimiaAgentLoop(AgentLoopBase):  # type: ignore[misc]  # verl ships no type information
    """One simia episode per sample (see the module docstring).

    Args:
        server: the simia server's URL (default: the row's `extra_info.server`).
        token: its bearer token, when it was started with `--token`.
        perturbation: `{"rate", "kinds"}`: faults injected into the episodes' calls, replayed by the rows' seed.
        *args, **kwargs: what verl passes every agent loop (config, server manager, tokenizer, ...).
    """

    def __init__(
        self,
        *args: Any,
        server: str | None = None,
        token: str | None = None,
        perturbation: Any = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("tools", None)  # verl's own tool list: the episode's tools come from simia
        super().__init__(*args, **kwargs)
        self.server = server
        self.token = token
        # the YAML's mapping arrives as an OmegaConf node: JSON needs plain values
        plain = OmegaConf.to_container(perturbation) if OmegaConf.is_config(perturbation) else perturbation
        self.perturbation: dict[str, Any] | None = cast(dict[str, Any], plain) if plain else None
        multi_turn = self.rollout_config.get("multi_turn", None) or {}
        self.max_turns = int(multi_turn.get("max_assistant_turns", None) or DEFAULT_TURNS)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra = dict(kwargs.get("extra_info") or {})
        server = self.server or extra.get("server")
        if not server or "world" not in extra or "task" not in extra:
            raise ValueError(
                "simia_agent needs the row's extra_info.world and .task and a server (the agent-loop YAML's "
                "`server`, or extra_info.server): build the rows with `python -m simia_verl.dataset`"
            )
        async with AsyncEnvClient(str(server), token=self.token) as client:
            uid = kwargs.get("uid")
            episode = await _episode(client, extra, None if uid is None else str(uid), self.perturbation)
            messages = [dict(m) for m in kwargs["raw_prompt"]]
            rollout = AsyncRollout(client, episode, messages)
            tools = None if extra.get("tools_in_prompt") else openai_tools(await client.list_tools(episode))
            return await self._turns(rollout, messages, tools, sampling_params)

    async def _turns(
        self,
        rollout: AsyncRollout,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        sampling_params: dict[str, Any],
    ) -> AgentLoopOutput:
        metrics: dict[str, Any] = {}
        request_id = uuid4().hex  # one id for the whole episode: the server keeps its prefix cache
        token_ids: list[int] = await self.ct_build_initial_tokens(messages, tools=tools)
        mask: list[int] = []  # one per response token: 1 generated by the policy, 0 the environment's
        logprobs: list[float] = []
        engine_fields: dict[str, Any] = {}  # what the inference server adds (verl's own loops pass it on)
        turns = observed = 0
        called: list[list[int | None]] = []  # the seq of each call of each policy turn
        while True:
            with simple_timer("generate_sequences", metrics):
                output = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=token_ids, sampling_params=sampling_params
                )  # fmt: skip
            turns += 1
            engine_fields.update(output.extra_fields)
            if output.num_preempted is not None:
                metrics["num_preempted"] = max(0, metrics.get("num_preempted", 0)) + output.num_preempted
            merged, mask, merged_logprobs = await self.ct_merge_assistant_token(
                token_ids, output.token_ids, mask, logprobs if (logprobs or output.log_probs) else None,
                assistant_logprobs=output.log_probs or None,
            )  # fmt: skip
            token_ids, logprobs = merged.token_ids, merged_logprobs or []
            text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            with simple_timer("tool_calls", metrics):
                turn = await rollout.act(text)
            called.append([result.seq for result in turn.results])
            if turn.done or turns >= self.max_turns or len(mask) >= self.response_length:
                break
            previous = list(messages)
            messages += [{"role": "assistant", "content": text}, *turn.observations]
            merged, next_mask, next_logprobs = await self.ct_merge_context_msg(
                previous, messages, token_ids, mask, logprobs or None, tools=tools
            )  # fmt: skip
            if len(next_mask) >= self.response_length:
                break
            token_ids, mask, logprobs = merged.token_ids, next_mask, next_logprobs or []
            observed += 1
        split = len(token_ids) - len(mask)  # as verl's own loops split them: the response is what the mask covers
        prompt_ids, response_ids = token_ids[:split], token_ids[split:][: self.response_length]
        mask = mask[: self.response_length]
        kept = logprobs[: self.response_length] or None
        tokens: dict[str, Any] = {"prompt_ids": prompt_ids, "completion_ids": response_ids, "env_mask": mask}
        if kept:
            tokens["logprobs"] = kept
        ended = await rollout.finish(tokens)
        metrics.setdefault("num_preempted", -1)
        output = self._output(ended, prompt_ids, response_ids, mask, kept, turns + observed + 1, metrics)
        output.extra_fields.update(_step_rewards(ended, called))
        output.extra_fields = {**engine_fields, **output.extra_fields}
        return output

    def _output(
        self,
        ended: Ended,
        prompt_ids: list[int],
        response_ids: list[int],
        mask: list[int],
        logprobs: list[float] | None,
        num_turns: int,
        metrics: dict[str, Any],
    ) -> AgentLoopOutput:
        masked = ended.training_reward is None
        if masked:
            reasons = ended.verdict.get("reasons")
            log.warning("simia episode %s: reward masked (%s); no token of it is trained on", ended.id, reasons)
        extra_fields = {
            "simia_episode": ended.id,
            "simia_masked": masked,
        }
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=[0] * len(mask) if masked else mask,
            response_logprobs=logprobs,
            reward_score=0.0 if masked else ended.training_reward,
            num_turns=num_turns,
            metrics=metrics,
            extra_fields=extra_fields,
        )


def _step_rewards(ended: Ended, called: list[list[int | None]]) -> dict[str, Any]:
    """verl's per-step reward fields from the verdict's progress curve: `tool_rewards` (each call's shaped
    reward, by its `seq`; 0 for a call that never reached the episode), `turn_scores` (their sum per policy turn)
    and `simia_progress` (start, end, gamma); empty without a curve (a task without checks)."""
    progress = ended.verdict.get("progress")
    if not progress:
        return {"tool_rewards": [], "turn_scores": [], "simia_progress": None}
    by_seq = {int(step["seq"]): float(step["reward"]) for step in progress.get("steps") or []}
    per_turn = [[by_seq.get(seq, 0.0) if seq is not None else 0.0 for seq in turn] for turn in called]
    return {
        "tool_rewards": [reward for turn in per_turn for reward in turn],
        "turn_scores": [math.fsum(turn) for turn in per_turn],
        "simia_progress": {key: progress.get(key) for key in ("start", "end", "gamma")},
    }
