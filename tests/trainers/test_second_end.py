"""An episode is judged once on every protocol: a second NeMo Gym `/verify` or OpenEnv end with the same response
(or transcript) answers the stored verdict, and one with another is a 409, as `POST /v1/episodes/{id}/end` answers,
so a rollout cannot be judged again on a better transcript. In-process, the mock world, a rules-only judge."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
from simia.sim.judging import Judge

ROW = {"task": "restock_milk", "responses_create_params": {"input": [{"role": "user", "content": "Milk to 4."}]}}


def response(text: str) -> dict[str, Any]:
    return {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}


def transcript(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "Milk to 4."}, {"role": "assistant", "content": text}]


async def test_a_second_nemo_gym_verify_with_another_response_is_a_409_and_the_same_one_the_stored_verdict(
    make_server: Any,
) -> None:
    async with make_server(judge=Judge(None)) as server, httpx.AsyncClient(base_url=server.url) as http:
        seeded = await http.post("/nemo-gym/mock/seed_session", json=ROW)
        first = await http.post("/nemo-gym/mock/verify", json={**ROW, "response": response("Done.")})
        same = await http.post("/nemo-gym/mock/verify", json={**ROW, "response": response("Done.")})
        other = await http.post("/nemo-gym/mock/verify", json={**ROW, "response": response("All done, I promise.")})
        stored = (await http.get(f"/v1/episodes/{seeded.json()['episode_id']}")).json()
    assert (first.status_code, same.status_code, other.status_code) == (200, 200, 409)
    assert same.json()["reward"] == first.json()["reward"]
    assert other.json()["error"]["code"] == "conflict"
    assert stored["transcript"][-1] == {"role": "assistant", "content": "Done."}  # the first one stands


async def test_a_second_openenv_end_with_another_transcript_is_a_409_and_the_same_one_the_stored_verdict(
    make_server: Any,
) -> None:
    async with make_server(judge=Judge(None)) as server, httpx.AsyncClient(base_url=server.url) as http:
        reset = await http.post("/openenv/mock/reset", json={"task": "restock_milk"})
        episode_id = reset.json()["observation"]["episode_id"]

        async def end(text: str) -> httpx.Response:
            action = {"type": "end", "transcript": transcript(text)}
            return await http.post("/openenv/mock/step", json={"action": action, "episode_id": episode_id})

        first, same, other = await end("Done."), await end("Done."), await end("All done, I promise.")
        bare = await http.post("/openenv/mock/step", json={"action": {"type": "end"}, "episode_id": episode_id})
    assert (first.status_code, same.status_code, other.status_code, bare.status_code) == (200, 200, 409, 200)
    assert same.json()["observation"]["verdict"] == first.json()["observation"]["verdict"]
    assert other.json()["error"]["code"] == "conflict"
