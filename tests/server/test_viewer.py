"""The episode viewer in a real browser: headless Chromium (Debian's, driven by Playwright) on a live server whose
episodes were made over MCP with a fake OpenAI-compatible provider, and judged."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from simia.server.settings import ServerSettings
from simia.sim.backends import ScriptedBackend, resolve_backend
from simia.sim.judging import Judge
from simia.testing import FakeProvider
from simia.testing.fake_cache import PromptCache
from simia.testing.mock_world import mock_world_answer

pytest.importorskip("playwright")
from playwright.async_api import Browser, Page, async_playwright, expect

XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
PASS = {
    "criteria": [{"criterion": "milk set to 4", "passed": True, "evidence": "call 1 <b>set</b> it"}],
    "reasoning": "Milk was set to 4.",
    "reward": 1,
}


def chromium() -> str:
    """The system Chromium (Debian's `chromium` package; `.ci/run` installs it where it is missing)."""
    found = os.environ.get("SIMIA_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no chromium on PATH: apt-get install -y chromium (.ci/run does)")
    return found


@dataclass
class Site:
    url: str
    http: httpx.AsyncClient
    judged: str  # ended and judged: a diff at step 1, an error whose text holds XSS at step 2
    fork: str  # forked from `judged` at step 1
    active: str  # no calls yet
    shots: Path


@contextlib.asynccontextmanager
async def site(make_server: Any, tmp_path: Path, settings: ServerSettings | None = None) -> AsyncIterator[Site]:
    headers = {"authorization": f"Bearer {settings.tokens[0]}"} if settings and settings.tokens else {}
    provider = FakeProvider(mock_world_answer)
    async with provider.running():
        backend = resolve_backend("openai-compatible:fake-model", base_url=provider.base_url)
        judge = Judge(ScriptedBackend([PASS], model="judge-model", when_exhausted="repeat"))
        async with (
            make_server(settings, backend=backend, judge=judge) as server,
            httpx.AsyncClient(base_url=server.url, headers=headers) as http,
        ):
            judged = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
            async with Client(streamable_http_client(judged["mcp_url"], http_client=http)) as client:
                await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
                await client.call_tool("get_item", {"name": XSS})
            transcript = [
                {"role": "user", "content": "Set the milk to 4 litres."},
                {"role": "assistant", "content": f"Done {XSS}"},
            ]
            await http.post(f"/v1/episodes/{judged['id']}/end", json={"transcript": transcript})
            fork = (await http.post(f"/v1/episodes/{judged['id']}/fork", json={"step": 1})).json()
            active = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
            shots = tmp_path / "screenshots"
            shots.mkdir()
            yield Site(server.url, http, judged["id"], fork["id"], active["id"], shots)
        await backend.aclose()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium())
        yield launched
        await launched.close()


async def new_page(browser: Browser, width: int = 1280) -> Page:
    page = await browser.new_page(viewport={"width": width, "height": 900})
    page.set_default_timeout(15_000)
    return page


async def test_the_runs_page_lists_sorts_and_filters_episodes_with_a_task_summary(
    browser: Browser, make_server: Any, tmp_path: Path
) -> None:
    async with site(make_server, tmp_path) as s:
        page = await new_page(browser)
        await page.goto(f"{s.url}/ui")
        rows = page.locator("#runs tbody tr")
        await expect(rows).to_have_count(3)
        assert await page.locator("#count").inner_text() == "1–3 of 3"
        judged = page.locator(f'tr[data-episode="{s.judged}"]')
        assert re.sub(r"\s+", " ", await judged.inner_text()).split(" ")[1:6] == [
            "mock",
            "restock_milk",
            "ended",
            "1",
            "2",
        ]  # world, task, status, reward, calls
        assert (await judged.locator("td").nth(11).inner_text()).endswith("root, 1 fork(s)")
        summary = page.locator("table.summary tbody tr")
        await expect(summary).to_have_count(1)
        assert (await summary.inner_text()).split("\t")[:4] == ["mock", "restock_milk", "3", "1"]
        await page.screenshot(path=s.shots / "runs.png", full_page=True)

        await page.select_option("select[name=status]", "ended")
        await page.click("form.filters button")
        await expect(rows).to_have_count(1)
        await expect(rows.first).to_have_attribute("data-episode", s.judged)

        await page.goto(f"{s.url}/ui?text=No+item+named")  # a word of a tool's output
        await expect(rows).to_have_count(1)
        await expect(rows.first).to_have_attribute("data-episode", s.judged)

        await page.goto(f"{s.url}/ui")
        await page.click("th >> text=reward")  # the judged episode first, the unjudged after it
        await expect(rows.first).to_have_attribute("data-episode", s.judged)
        await page.click(f'tr[data-episode="{s.fork}"] >> td >> nth=11 >> a')  # its fork group, together
        await expect(rows).to_have_count(2)
        assert sorted([await r.get_attribute("data-episode") for r in await rows.all()]) == sorted([s.judged, s.fork])

        await page.goto(f"{s.url}/ui?sort=size")
        assert "unknown sort 'size'" in await page.locator(".problem").inner_text()


async def test_clicking_from_runs_to_an_episode_to_a_step_shows_its_diff_verdict_and_state(
    browser: Browser, make_server: Any, tmp_path: Path
) -> None:
    async with site(make_server, tmp_path) as s:
        page = await new_page(browser)
        await page.goto(f"{s.url}/ui")
        await page.click(f'tr[data-episode="{s.judged}"] a.row-link')
        await expect(page.locator("h1")).to_have_text(s.judged)
        await expect(page.locator("#timeline-rows tr")).to_have_count(2)
        await page.click("#step-1 a.row-link")
        await expect(page.locator("#detail h2")).to_have_text("Step 1: set_quantity")
        diff = [await r.inner_text() for r in await page.locator("table.diff tbody tr").all()]
        assert [d.split("\t") for d in diff] == [["changed", "/items/milk/qty", "0", "4"]]
        verdict = page.locator("#verdict")
        assert [c.split("\t") for c in await verdict.locator("table.checks tbody tr").all_inner_texts()] == [
            ["/items/milk/qty", "4", "4", "✓ pass"]
        ]
        assert [c.split("\t") for c in await verdict.locator("table.criteria tbody tr").all_inner_texts()] == [
            ["milk set to 4", "✓ pass", "call 1 <b>set</b> it"]
        ]
        facts = await verdict.locator(".facts").inner_text()
        assert "reward 1" in facts and "judge judge-model" in facts
        transcript = await page.locator("#transcript .msg").all_inner_texts()
        assert len(transcript) == 2 and "Set the milk to 4 litres." in transcript[0]
        lineage = await page.locator(".lineage").inner_text()
        assert f"{s.fork[:14]} (step 1)" in lineage and "(2 episodes)" in lineage
        await page.screenshot(path=s.shots / "episode.png", full_page=True)

        await page.click("#state-link")
        await expect(page.locator("h1")).to_have_text("State after step 1")
        assert '"qty": 4' in await page.locator("pre.json").inner_text()
        await page.screenshot(path=s.shots / "state.png", full_page=True)

        await page.goto(f"{s.url}/ui/episodes/{s.fork}")
        assert f"forked from {s.judged} at step 1" in await page.locator(".lineage").inner_text()


async def test_strings_from_agents_and_models_render_as_text_and_never_run(
    browser: Browser, make_server: Any, tmp_path: Path
) -> None:
    async with site(make_server, tmp_path) as s:
        page = await new_page(browser)
        dialogs: list[str] = []
        page.on("dialog", lambda d: dialogs.append(d.message))
        await page.goto(f"{s.url}/ui/episodes/{s.judged}?step=2")
        result = await page.locator("#detail pre.text").inner_text()
        assert result == f"Error (item_not_found): No item named {XSS}."  # the tool's output, as its characters
        assert XSS in await page.locator("#transcript").inner_text()
        assert await page.evaluate("window.__xss") is None
        assert await page.locator("#detail script, #transcript img, #timeline img").count() == 0
        await page.goto(f"{s.url}/ui?text={XSS[:8]}")
        assert await page.evaluate("window.__xss") is None and dialogs == []


async def test_an_active_episode_updates_live_as_calls_land_and_when_it_ends(
    browser: Browser, make_server: Any, tmp_path: Path
) -> None:
    async with site(make_server, tmp_path) as s:
        page = await new_page(browser)
        await page.goto(f"{s.url}/ui/episodes/{s.active}")
        await expect(page.locator("#live")).to_be_visible()
        await expect(page.locator("#timeline-rows tr")).to_have_count(0)
        async with Client(f"{s.url}/episodes/{s.active}/mcp") as client:
            await client.call_tool("set_quantity", {"name": "milk", "qty": 7})
            await expect(page.locator("#step-1")).to_contain_text("set_quantity")
            await client.call_tool("get_item", {"name": "milk"})
            await expect(page.locator("#step-2")).to_contain_text("get_item")
        await s.http.post(f"/v1/episodes/{s.active}/end", json={})
        await expect(page.locator("#facts .badge").first).to_have_text("ended")  # the page reloaded
        await expect(page.locator("#live")).to_have_count(0)


async def test_the_keyboard_moves_through_runs_and_steps(browser: Browser, make_server: Any, tmp_path: Path) -> None:
    async with site(make_server, tmp_path) as s:
        page = await new_page(browser)
        await page.goto(f"{s.url}/ui?sort=time&dir=asc")
        await page.keyboard.press("j")
        focused = await page.evaluate("document.activeElement.closest('tr').dataset.episode")
        assert focused == s.judged
        await page.keyboard.press("Enter")
        await expect(page.locator("h1")).to_have_text(s.judged)
        await expect(page.locator("#detail h2")).to_have_text("Step 2: get_item")  # the last step by default
        await page.keyboard.press("k")
        await expect(page.locator("#detail h2")).to_have_text("Step 1: set_quantity")
        await page.keyboard.press("s")
        await expect(page.locator("h1")).to_have_text("State after step 1")
        await page.keyboard.press("u")
        await expect(page.locator("h1")).to_have_text(s.judged)
        await page.keyboard.press("u")
        await expect(page.locator("h1")).to_have_text("Runs")
        await page.keyboard.press("/")
        assert await page.evaluate("document.activeElement.id") == "text-filter"


async def test_the_world_page_shows_tools_with_schemas_tasks_and_reward_per_task(
    browser: Browser, make_server: Any, tmp_path: Path
) -> None:
    async with site(make_server, tmp_path) as s:
        page = await new_page(browser)
        await page.goto(f"{s.url}/ui/worlds")
        await page.click("a.row-link >> text=mock")
        await expect(page.locator("details.tool")).to_have_count(3)
        await page.click("#tool-set_quantity summary")
        schema = await page.locator("#tool-set_quantity pre.json").first.inner_text()
        assert '"required": [\n    "name",\n    "qty"\n  ]' in schema
        assert "item_not_found" in await page.locator("#tool-set_quantity").inner_text()
        assert "restock_milk" in await page.locator("table.tasks").inner_text()
        rate = (await page.locator("table.summary tbody tr").inner_text()).split("\t")
        assert rate[:5] == ["mock", "restock_milk", "3", "1", " 1.00"]
        await page.screenshot(path=s.shots / "world.png", full_page=True)


async def test_a_narrow_window_scrolls_tables_inside_the_page_not_the_page(
    browser: Browser, make_server: Any, tmp_path: Path
) -> None:
    async with site(make_server, tmp_path) as s:
        page = await new_page(browser, width=380)
        for path in ("/ui", f"/ui/episodes/{s.judged}?step=1", "/ui/worlds/mock"):
            await page.goto(s.url + path)
            overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{path}: the page is {overflow}px wider than a 380px window"
        await page.screenshot(path=s.shots / "narrow.png", full_page=True)


async def test_with_a_token_the_viewer_asks_for_it_once_and_keeps_it_in_an_httponly_cookie(
    browser: Browser, make_server: Any, tmp_path: Path
) -> None:
    async with site(make_server, tmp_path, ServerSettings(tokens=("s3cret=/;x",))) as s:
        page = await new_page(browser)
        await page.goto(f"{s.url}/ui/episodes/{s.judged}")
        await expect(page.locator("h1")).to_have_text("Sign in")
        await page.fill("input[name=token]", "wrong")
        await page.click("form.login button")
        await expect(page.locator(".problem")).to_contain_text("Unknown token")
        await page.fill("input[name=token]", "s3cret=/;x")
        await page.click("form.login button")
        await expect(page.locator("h1")).to_have_text(s.judged)  # back where it was going
        assert await page.evaluate("document.cookie") == ""  # HttpOnly: no script can read the token
        cookies = await page.context.cookies()
        assert [(c["name"], c["httpOnly"], c["sameSite"], c["path"]) for c in cookies] == [
            ("simia_token", True, "Strict", "/ui")
        ]
        await page.screenshot(path=s.shots / "episode-signed-in.png")

        other = await browser.new_page()
        await other.goto(f"{s.url}/ui/login?token=s3cret%3D%2F%3Bx")  # a ?token= link
        await expect(other.locator("h1")).to_have_text("Runs")
        async with httpx.AsyncClient(base_url=s.url) as anonymous:
            assert (await anonymous.get("/ui")).status_code == 303
            assert (await anonymous.get("/v1/episodes")).status_code == 401  # the API still wants the header


async def test_the_episode_and_runs_pages_show_what_the_model_calls_cost_with_the_cached_tokens(
    browser: Browser, make_server: Any
) -> None:
    """An Anthropic model with a prompt cache (the fake's, its minimum lowered for the mock world's short prompt)
    prices each call; the episode page sums its events' usage, the runs page its episodes."""
    async with FakeProvider(mock_world_answer, prompt_cache=PromptCache(anthropic_min=256)).running() as fake:
        backend = resolve_backend(
            "anthropic:claude-sonnet-4-6", base_url=fake.anthropic_url, env={"ANTHROPIC_API_KEY": "k"}
        )
        async with make_server(backend=backend) as server, httpx.AsyncClient(base_url=server.url) as http:
            episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
            async with Client(streamable_http_client(episode["mcp_url"], http_client=http)) as client:
                for name in ("apple", "rice", "milk"):
                    await client.call_tool("get_item", {"name": name})
            usage = [e["usage"] for e in (await http.get(f"/v1/episodes/{episode['id']}")).json()["events"]]
            page = await new_page(browser)
            await page.goto(f"{server.url}/ui/episodes/{episode['id']}")
            episode_cost = await page.locator("#cost").inner_text()
            await page.goto(f"{server.url}/ui")
            run_cost = await page.locator("#run-cost").inner_text()
        await backend.aclose()
    total = {key: sum(u[key] for u in usage) for key in usage[0] if key != "calls"}
    assert total["cached_tokens"] > 0 and total["cache_write_tokens"] > 0 and total["cost_usd"] > 0
    tokens = f"{total['prompt_tokens']:,} input tokens"
    output = f"{total['completion_tokens']:,} output tokens"
    cache = f"({total['cached_tokens']:,} cached, {total['cache_write_tokens']:,} written to the cache)"
    assert episode_cost == f"simulator cost ${total['cost_usd']:.4f} · {tokens} {cache} · {output}"
    assert run_cost == f"cost of the 1 episode(s) listed: ${total['cost_usd']:.4f} · {tokens} · {output}"


async def test_the_episode_page_draws_the_progress_curve_of_a_task_with_checks_and_nothing_without_checks(
    browser: Browser, make_server: Any, tmp_path: Path
) -> None:
    """The mock world's `weekly_restock` (apples weigh 2, milk and rice 1; the rice must never reach 0): set the
    apples, empty the rice (a kept check broken and a forbidden state reached), mend it, set the milk. The
    process judge scores each call (the episode has no transcript: one step per call)."""
    steps = [("useful", "apples set"), ("harmful", "emptied the rice"), ("useful", "mended"), ("useful", "milk set")]
    scores = {"steps": [{"step": i, "score": s, "reason": r} for i, (s, r) in enumerate(steps, start=1)]}
    judge = Judge(ScriptedBackend([PASS, scores, PASS, {"steps": [scores["steps"][0]]}]), process=True)
    async with make_server(judge=judge) as server, httpx.AsyncClient(base_url=server.url) as http:
        restock = (await http.post("/v1/episodes", json={"world": "mock", "task": "weekly_restock"})).json()
        plain = (await http.post("/v1/episodes", json={"world": "mock"})).json()  # no task: no checks
        for episode, calls in (
            (restock, [("apple", 6), ("rice", 0), ("rice", 2), ("milk", 2)]),
            (plain, [("milk", 1)]),
        ):
            async with Client(streamable_http_client(episode["mcp_url"], http_client=http)) as client:
                for name, qty in calls:
                    await client.call_tool("set_quantity", {"name": name, "qty": qty})
            await http.post(f"/v1/episodes/{episode['id']}/end", json={})
        page = await new_page(browser)
        await page.goto(f"{server.url}/ui/episodes/{restock['id']}?step=2")
        chart = page.locator("#progress svg.progress-chart")
        points = [
            (
                await p.get_attribute("data-seq"),
                await p.get_attribute("data-progress"),
                await p.get_attribute("data-reward"),
            )
            for p in await chart.locator("circle.pt").all()
        ]
        marks = [
            (await m.get_attribute("class"), await m.get_attribute("data-seq"), await m.get_attribute("data-pointers"))
            for m in await chart.locator("g.mark").all()
        ]
        label = await chart.get_attribute("aria-label")
        table = [r.split("\t") for r in await page.locator("#progress-steps tbody tr").all_inner_texts()]
        facts = await page.locator("#progress .facts").inner_text()
        detail = await page.locator("#detail .facts").inner_text()
        process = [r.split("\t") for r in await page.locator("#process tbody tr").all_inner_texts()]
        await page.screenshot(path=tmp_path / "progress.png", full_page=True)
        await page.goto(f"{server.url}/ui/episodes/{plain['id']}")
        without = await page.locator("#progress, svg.progress-chart").count()
        plain_process = await page.locator("#process tbody tr").all_inner_texts()
    assert points == [
        ("0", "0.25", None),
        ("1", "0.75", "0.5"),
        ("2", "0.0", "-0.75"),
        ("3", "0.75", "0.75"),
        ("4", "1.0", "0.25"),
    ]
    assert marks == [("mark violated", "2", "/items/rice/qty"), ("mark broken", "2", "/items/rice/qty")]
    assert label == "progress from 0.25 to 1.00 over 4 call(s)"
    assert table == [
        ["start", "", "0.25", "", ""],
        ["1", "set_quantity", "0.75", "+0.50", "achieved /items/apple/qty"],
        ["2", "set_quantity", "0.00", "-0.75", "broke /items/rice/qty; forbidden /items/rice/qty reached"],
        ["3", "set_quantity", "0.75", "+0.75", "achieved /items/rice/qty"],
        ["4", "set_quantity", "1.00", "+0.25", "achieved /items/milk/qty"],
    ]
    assert (
        facts == "start 0.25 · end 1.00 · shaped rewards sum to +0.75 · gamma 1 · 3 goal check(s), 1 forbidden state(s)"
    )
    assert detail.endswith(
        "progress 0.00 · shaped reward -0.75 · broke /items/rice/qty · forbidden /items/rice/qty reached"
    )
    assert process == [["1", "", "1", "useful", "apples set"], ["2", "", "2", "harmful", "emptied the rice"],
                       ["3", "", "3", "useful", "mended"], ["4", "", "4", "useful", "milk set"]]  # fmt: skip
    assert without == 0 and plain_process == ["1\t\t1\tuseful\tapples set"]
