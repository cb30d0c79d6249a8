"""Seed records of each dataset format, read into one shape: a `Seed` (the tools in MCP's shape, the conversation in
OpenAI chat format with `tool_calls` and `tool` replies, the record's system prompt).

    format    one record                                                       as in
    sharegpt  conversations [{from: human|gpt|function_call|observation,      Salesforce/APIGen-MT-5k (`apigen`),
              value}], tools (a JSON string), system (the policy)             LLaMA-Factory's ShareGPT
    hermes    conversations [{from: system|human|gpt|tool, value}]: tools     NousResearch/hermes-function-calling-v1
              in <tools>...</tools>, calls in <tool_call>, results in
              <tool_response>
    toolace   system (the tools as a JSON list in its text), conversations    Team-ACE/ToolACE
              [{from: user|assistant|tool}]; calls as [name(arg=value)]
    glaive    system ("... functions ... {json} {json}"), chat ("USER: ...     glaiveai/glaive-function-calling-v2
              ASSISTANT: <functioncall> {...} FUNCTION RESPONSE: ...")
    xlam      query, tools (a JSON string; Python type strings), answers       Salesforce/xlam-function-calling-60k
    openai    messages (OpenAI chat), tools                                    any Chat Completions log
    nemotron  messages, tools, and uuid / metadata / used_in / license         nvidia/Nemotron-Agentic-v1, -SFT-...
    toucan    messages (Qwen-Agent's function_call and function turns),        Agent-Ark/Toucan-1.5M
              available_tools, metadata (its MCP servers' tools)

Calls to a `think` pseudo-tool become the next assistant turn's `reasoning_content` (their results are dropped).
The system turn of hermes, toolace and glaive records is a calling convention (the tool list and the call syntax,
which MCP replaces), not a policy: it is dropped, and says so among the record's changes.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from typing import Any

from .seeds_chat import CONVENTION_CHANGE, MALFORMED_CALL, NO_USER, UNKNOWN_TURN, Chat, Seed, message_text
from .seeds_records import SkipRecord, loads
from .seeds_tools import NO_TOOLS, NormalTools, normal_tools, parse_loose

__all__ = ["FAMILIES", "FORMATS", "Seed", "detect", "read_seed"]

FORMATS = ("apigen", "sharegpt", "hermes", "openai", "xlam", "toolace", "nemotron", "toucan", "glaive")
"""The formats `simia import seeds --format` names (`auto` tells them apart per file)."""
FAMILIES = {"apigen": "sharegpt", "nemotron": "openai"}
"""Formats read by another's reader: APIGen-MT is ShareGPT, Nemotron's agentic sets are OpenAI chat."""

ToolsOf = Callable[[Any], NormalTools]


def detect(record: dict[str, Any]) -> str | None:
    """The format a record is written in, told from its fields (None when they match no format)."""
    turns = record.get("conversations")
    if isinstance(turns, str) and turns.lstrip().startswith("["):  # a JSON string (a Parquet column)
        try:
            turns = loads(turns)
        except (ValueError, RecursionError):
            return None
    if isinstance(turns, list):
        roles = {str(t.get("from", t.get("role", ""))).lower() for t in turns if isinstance(t, dict)}
        values = [t.get("value") for t in turns if isinstance(t, dict)]
        if any(isinstance(v, str) and ("<tool_call>" in v or "<tools>" in v) for v in values):
            return "hermes"
        if "tools" in record or roles & {"human", "gpt", "function_call", "observation"}:
            return "sharegpt"
        if isinstance(record.get("system"), str) and roles & {"user", "assistant", "tool"}:
            return "toolace"
        return None
    if "query" in record and "answers" in record:
        return "xlam"
    if isinstance(record.get("chat"), str) and isinstance(record.get("system"), str):
        return "glaive"
    if "messages" in record:
        if record.keys() & {"available_tools", "target_tools", "subset_name"}:
            return "toucan"
        if record.keys() & {"uuid", "metadata", "used_in", "license", "reasoning"}:
            return "nemotron"
        return "openai"
    return None


def read_seed(fmt: str, record: dict[str, Any], tools_of: ToolsOf = normal_tools) -> Seed:
    """Read `record` as format `fmt` (one of `FORMATS`).

    Args:
        tools_of: turns the record's raw tools into `NormalTools` (a caching wrapper of `normal_tools` for a large
            file whose records repeat their tools).

    Raises:
        SkipRecord: the record cannot become a seed (no tools, invalid schemas, a call of an unlisted tool, ...).
    """
    seen: list[NormalTools] = []

    def remembered(raw: Any) -> NormalTools:
        seen.append(tools_of(raw))
        return seen[-1]

    try:
        return _READERS[FAMILIES.get(fmt, fmt)](record, remembered)
    except SkipRecord as skip:
        skip.tools = seen[-1] if seen else None
        raise


def _structure(value: Any) -> Any:
    """A field that datasets store either as JSON text (Parquet columns) or as the structure itself."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return loads(value)
        except (ValueError, RecursionError):
            raise SkipRecord("not JSON", "a field holding JSON text does not parse") from None
    return value


def _call(value: Any) -> tuple[Any, Any, Any]:
    if not isinstance(value, dict):
        raise SkipRecord(MALFORMED_CALL, f"a call is a {type(value).__name__}, not an object")
    if isinstance(value.get("function"), dict):  # OpenAI's tool_calls item
        function = value["function"]
        return function.get("name"), function.get("arguments"), value.get("id")
    arguments = value.get("arguments", value.get("parameters"))
    return value.get("name"), arguments, value.get("id")


def _calls(value: Any) -> list[tuple[Any, Any, Any]]:
    if isinstance(value, str):
        try:
            value = parse_loose(value)
        except ValueError:
            raise SkipRecord(MALFORMED_CALL, "a function_call turn that is not JSON") from None
    return [_call(item) for item in (value if isinstance(value, list) else [value])]


def _turns(record: dict[str, Any]) -> list[tuple[str, Any]]:
    turns = _structure(record.get("conversations"))
    if not isinstance(turns, list):
        raise SkipRecord(NO_USER, "no conversations list")
    out: list[tuple[str, Any]] = []
    for turn in turns:
        if not isinstance(turn, dict):
            raise SkipRecord(UNKNOWN_TURN, "a turn that is not an object")
        out.append((str(turn.get("from", turn.get("role", ""))).lower(), turn.get("value", turn.get("content"))))
    return out


def _sharegpt(record: dict[str, Any], tools_of: ToolsOf) -> Seed:
    chat = Chat(tools_of(_structure(record.get("tools"))))
    system = record.get("system") if isinstance(record.get("system"), str) else ""
    for role, value in _turns(record):
        if role in ("human", "user"):
            chat.user(value)
        elif role in ("gpt", "assistant"):
            chat.assistant(value)
        elif role in ("function_call", "tool_call"):
            chat.assistant(None, _calls(value))
        elif role in ("observation", "function", "tool", "tool_response"):
            chat.result(value)
        elif role == "system":
            system = system or message_text(value)
        else:
            raise SkipRecord(UNKNOWN_TURN, f"from {role!r}")
    return chat.seed(str(system))


_TOOLS_BLOCK = re.compile(r"<tools>(.*?)</tools>", re.DOTALL)
_CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_RESPONSE_BLOCK = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)


def _hermes(record: dict[str, Any], tools_of: ToolsOf) -> Seed:
    turns = _turns(record)
    raw = _structure(record.get("tools"))
    if raw is None:
        listed = [
            m.group(1) for role, value in turns if role == "system" for m in _TOOLS_BLOCK.finditer(message_text(value))
        ]
        raw = [tool for block in listed for tool in _objects(block)]
    chat = Chat(tools_of(raw))
    for role, value in turns:
        text = message_text(value)
        if role == "system":
            chat.changes.add(CONVENTION_CHANGE)
        elif role in ("human", "user"):
            chat.user(text)
        elif role in ("gpt", "assistant"):
            calls = [_call(_loose_call(block)) for block in _CALL_BLOCK.findall(text)]
            chat.assistant(_CALL_BLOCK.sub("", text), calls)
        elif role in ("tool", "function", "observation"):
            blocks = _RESPONSE_BLOCK.findall(text) or [text]
            for block in blocks:
                chat.result(_response(block.strip()))
        else:
            raise SkipRecord(UNKNOWN_TURN, f"from {role!r}")
    return chat.seed()


def _loose_call(text: str) -> Any:
    try:
        return parse_loose(text.strip())
    except ValueError:
        raise SkipRecord(MALFORMED_CALL, "a <tool_call> that is neither JSON nor a Python literal") from None


def _response(text: str) -> Any:
    """A <tool_response> body: the `content` of Hermes' {"name", "content"} wrapper, else the text."""
    try:
        value = parse_loose(text)
    except ValueError:
        return text
    if isinstance(value, dict) and "content" in value and value.keys() <= {"name", "content", "tool_call_id"}:
        return value["content"]
    return text


def _objects(text: str) -> list[Any]:
    """The tools written in a text: one JSON (or Python-literal) list or object, or several in a row."""
    try:
        value = parse_loose(text.strip())
        return value if isinstance(value, list) else [value]
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    found: list[Any] = []
    start = text.find("{")
    while start >= 0:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        found.append(value)
        start = text.find("{", end)
    return found


def _toolace(record: dict[str, Any], tools_of: ToolsOf) -> Seed:
    raw = _structure(record.get("tools"))
    system = record.get("system") if isinstance(record.get("system"), str) else ""
    if raw is None:
        raw = _listed_tools(str(system))
    chat = Chat(tools_of(raw))
    if system:
        chat.changes.add(CONVENTION_CHANGE)
    for role, value in _turns(record):
        text = message_text(value)
        if role in ("user", "human"):
            chat.user(text)
        elif role in ("assistant", "gpt"):
            calls = bracket_calls(text)
            if calls is None:
                chat.assistant(text)
            else:
                chat.assistant(None, [(name, args, None) for name, args in calls])
        elif role in ("tool", "observation", "function"):
            chat.named_results(text)
        elif role == "system":
            chat.changes.add(CONVENTION_CHANGE)
        else:
            raise SkipRecord(UNKNOWN_TURN, f"from {role!r}")
    return chat.seed()


def _listed_tools(text: str) -> Any:
    """The first JSON list of named objects in a system prompt's text (ToolACE writes its tools there)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\[\s*\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value):
            return value
    return None


def bracket_calls(text: str) -> list[tuple[str, dict[str, Any]]] | None:
    """ToolACE's `[name(a=1, b="x"), other()]` as (name, arguments) pairs; None when the text is not such a list.

    Names are taken as written up to the `(` (ToolACE's may hold spaces); values are Python or JSON literals.
    """
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        return None
    body = body[1:-1]
    calls: list[tuple[str, dict[str, Any]]] = []
    i = 0
    while i < len(body):
        while i < len(body) and body[i] in " \t\r\n,":
            i += 1
        if i >= len(body):
            break
        opening = body.find("(", i)
        closing = _closing(body, opening) if opening >= 0 else -1
        name = body[i:opening].strip() if opening >= 0 else ""
        if closing < 0 or not name or any(c in name for c in "[]{}\"'=,"):
            return None
        arguments = _keywords(body[opening + 1 : closing])
        if arguments is None:
            return None
        calls.append((name, arguments))
        i = closing + 1
    return calls or None


def _closing(text: str, opening: int) -> int:
    depth, quote, escaped = 0, "", False
    for i in range(opening, len(text)):
        char = text[i]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _keywords(text: str) -> dict[str, Any] | None:
    try:
        node = ast.parse(f"_({text})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(node, ast.Call) or node.args:
        return None
    out: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            return None
        try:
            out[keyword.arg] = _literal(keyword.value)
        except ValueError:
            return None
    return out


def _literal(node: Any) -> Any:
    names = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise ValueError("** in a dict")
        return {str(_literal(k)): _literal(v) for k, v in zip(node.keys, node.values, strict=True)}
    return ast.literal_eval(node)


_GLAIVE_TURN = re.compile(r"(?:^|\n)\s*(USER|ASSISTANT|FUNCTION RESPONSE)\s*:")


def _glaive(record: dict[str, Any], tools_of: ToolsOf) -> Seed:
    system = str(record.get("system") or "")
    raw = [tool for tool in _objects(system[system.find("{") :]) if isinstance(tool, dict)] if "{" in system else []
    if not raw:
        raise SkipRecord(NO_TOOLS)
    chat = Chat(tools_of(raw))
    chat.changes.add(CONVENTION_CHANGE)
    parts = _GLAIVE_TURN.split(str(record.get("chat") or ""))
    for role, value in zip(parts[1::2], parts[2::2], strict=True):
        text = value.replace("<|endoftext|>", "").strip()
        if role == "USER":
            chat.user(text)
        elif role == "ASSISTANT":
            before, marker, after = text.partition("<functioncall>")
            chat.assistant(before, [_call(_glaive_call(after))] if marker else [])
        else:
            chat.result(text)
    return chat.seed()


def _glaive_call(text: str) -> Any:
    """`{"name": "f", "arguments": '{"a": 1}'}`: glaive quotes the arguments' JSON text in single quotes."""
    try:
        return parse_loose(text.strip())
    except ValueError:
        pass
    quoted = re.sub(r"'(\{.*\})'", lambda m: json.dumps(m.group(1)), text.strip(), flags=re.DOTALL)
    try:
        return loads(quoted)
    except (ValueError, RecursionError):
        raise SkipRecord(MALFORMED_CALL, "a <functioncall> that does not parse") from None


def _xlam(record: dict[str, Any], tools_of: ToolsOf) -> Seed:
    chat = Chat(tools_of(_structure(record.get("tools"))))
    answers = record.get("answers")
    if isinstance(answers, str):
        try:
            answers = parse_loose(answers)
        except ValueError:
            raise SkipRecord(MALFORMED_CALL, "the answers are not JSON") from None
    chat.user(record.get("query"))
    chat.assistant(None, _calls(answers if answers is not None else []))
    return chat.seed()


def _openai(record: dict[str, Any], tools_of: ToolsOf) -> Seed:
    return _chat_messages(record, tools_of(_structure(record.get("tools"))))


def _toucan(record: dict[str, Any], tools_of: ToolsOf) -> Seed:
    raw = _structure(record.get("available_tools", record.get("tools")))
    if not raw or (isinstance(raw, list) and not all(isinstance(t, dict) for t in raw)):  # none, or names only
        metadata = _structure(record.get("metadata"))
        servers = metadata.get("mcp_servers") if isinstance(metadata, dict) else None
        raw = [
            tool
            for server in (servers if isinstance(servers, list) else [])
            if isinstance(server, dict)
            for tool in ((server.get("remote_server_response") or {}).get("tools") or [])
        ]
    return _chat_messages(record, tools_of(raw))


def _chat_messages(record: dict[str, Any], tools: NormalTools) -> Seed:
    messages = _structure(record.get("messages"))
    if not isinstance(messages, list):
        raise SkipRecord(NO_USER, "no messages list")
    chat = Chat(tools)
    system: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            raise SkipRecord(UNKNOWN_TURN, "a message that is not an object")
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.append(message_text(content))
        elif role == "user":
            chat.user(content)
        elif role == "assistant":
            calls = [_call(c) for c in message.get("tool_calls") or []]
            if isinstance(message.get("function_call"), dict):  # the legacy form (Qwen-Agent, Toucan)
                calls.append(_call(message["function_call"]))
            reasoning = message.get("reasoning_content", message.get("reasoning"))
            chat.assistant(content, calls, reasoning)
        elif role == "tool":
            chat.result(content, message.get("tool_call_id"))
        elif role == "function":
            chat.result(content)
        else:
            raise SkipRecord(UNKNOWN_TURN, f"role {role!r}")
    return chat.seed("\n\n".join(s for s in system if s.strip()))


_READERS: dict[str, Callable[[dict[str, Any], ToolsOf], Seed]] = {
    "sharegpt": _sharegpt,
    "hermes": _hermes,
    "toolace": _toolace,
    "glaive": _glaive,
    "xlam": _xlam,
    "openai": _openai,
    "toucan": _toucan,
}
