"""Declarations that compute: JSONata expressions over a call's arguments and the episode's state, bounded.

A grounding (`simia.sim.world.grounding`) may compute what a template cannot say: a sum over an order's items, a
balance read from the state, one operation per array element, a sorted list, an id. It does so in JSONata
(https://jsonata.org, the language AWS Step Functions uses to transform JSON state), evaluated by the pure-Python
`jsonata-python`, which reads the state where it lies: an expression costs what it touches (0.2-0.3 ms for a keyed
read on the 16x retail world, where a Rust or CEL binding converted the whole state on every call: 55-1,300 ms).

An evaluation sees `$args` (the call's arguments, defaults filled in), `$state`, `$before` (the state before the
call; `$state` is the state after the effects inside a read), the grounding's `let` names, and simia's functions
(`$pointer`, `$newid`, `$round`, `$float`, `$string`). It is deterministic and does no I/O; it is bounded in time,
depth and size (`Bounds`), and a failure is an `ExpressionError`, never a crash. Numbers keep Python's JSON types:
a sum of prices stays a float (`100.0`), `$round` rounds the binary value as Python's `round` does, `$float` is
Python's `float` and `$string` writes a number as Python's `str` does, so an answer reads byte for byte as the
Python API it mirrors writes it (JSONata's own model has one number type and would write `100`).
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_LIMIT = sys.getrecursionlimit()
import jsonata  # noqa: E402  (it raises the process's recursion limit to 10,000 on import: put back below)
from jsonata import functions as _functions  # noqa: E402
from jsonata import utils as _utils  # noqa: E402

from ..errors import ExpressionError  # noqa: E402

sys.setrecursionlimit(_LIMIT)  # the server's own limits (a JSON body nested 5,000 deep is a parse error) stay

__all__ = [
    "RESERVED_NAMES",
    "Bounds",
    "ExpressionError",
    "argument_names",
    "evaluate",
    "parse_problem",
    "with_functions",
]

RESERVED_NAMES = frozenset(
    {"args", "state", "before", "call", "pointer", "newid", "round", "float", "string", "number"}
)
"""Variable names simia binds in every evaluation: a `let` cannot take them."""


@dataclass(frozen=True)
class Bounds:
    """What one evaluation may take.

    Attributes:
        timeout_ms: wall-clock time, checked at every step of the evaluation.
        max_depth: nesting of evaluation steps (a runaway recursion stops here).
        max_items: the longest list or string any step may produce (a range, a join, a padded string).
    """

    timeout_ms: float = 1000.0
    max_depth: int = 200
    max_items: int = 100_000


_CACHE = threading.local()
"""Compiled expressions, per thread: a compiled `Jsonata` keeps evaluation state on itself."""


def _compiled(text: str) -> jsonata.Jsonata:
    cache: dict[str, jsonata.Jsonata] | None = getattr(_CACHE, "expressions", None)
    if cache is None:
        cache = _CACHE.expressions = {}
    compiled = cache.get(text)
    if compiled is None:
        try:
            compiled = _Expression(text)
        except Exception as exc:  # the parser raises JException, and plain Python errors on odd input
            raise ExpressionError(_message(exc, text)) from exc
        compiled.set_validate_input(False)  # its check walks the whole input: the state, on every call
        if len(cache) > 4096:
            cache.clear()
        cache[text] = compiled
    return compiled


def parse_problem(text: str) -> str | None:
    """Why `text` is not a JSONata expression (None when it is one)."""
    try:
        _compiled(text)
    except ExpressionError as exc:
        return str(exc)
    return None


_ARG = re.compile(r"\$args\.(?:`([^`]+)`|([A-Za-z_][A-Za-z0-9_]*))")


def argument_names(text: str) -> set[str]:
    """The argument names an expression reads as `$args.NAME` (or `` $args.`odd name` ``)."""
    return {m.group(1) or m.group(2) for m in _ARG.finditer(text)}


_NAME = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def with_functions(functions: Mapping[str, str], text: str) -> str:
    """`text` inside a block that first binds the world's functions it calls (`$name := function...;`, those they
    call in turn included, in the world's order), or `text` itself when it calls none: binding all of a world's
    functions on every evaluation costs about 1 ms for telecom's 30."""
    needed: set[str] = set()
    pending = [name for name in _NAME.findall(text) if name in functions]
    while pending:
        name = pending.pop()
        if name not in needed:
            needed.add(name)
            pending += [n for n in _NAME.findall(functions[name]) if n in functions and n not in needed]
    if not needed:
        return text
    prelude = "".join(f"${name} := {body};\n" for name, body in functions.items() if name in needed)
    return f"(\n{prelude}({text})\n)"


def evaluate(
    text: str,
    variables: Mapping[str, Any],
    *,
    bounds: Bounds = Bounds(),
    id_seed: Callable[[], str] | None = None,
) -> Any:
    """Evaluate `text` with `variables` bound (`$name`). Returns a plain JSON value, None when the expression
    gives nothing (JSONata's undefined; a JSON null is None too, so test `$exists` where the two differ).

    Args:
        id_seed: what `$newid` draws its ids from (an episode's seed and step); without one `$newid` fails.

    Raises:
        ExpressionError: the expression does not parse, fails, or runs past `bounds`.
    """
    compiled = _compiled(text)
    started = time.monotonic()
    depth = [0]

    steps = [0]
    counted: list[bool] = []  # per step entered: whether it counted towards the depth

    def entry(_expr: Any, _input: Any, env: Any) -> None:
        # JSONata sets is_parallel_call on a shared frame while it builds an array or object and leaves it set, so
        # the exit of a step must undo what its own entry did, not read the flag again.
        counts = not env.is_parallel_call
        counted.append(counts)
        if not counts:
            return
        depth[0] += 1
        if depth[0] > bounds.max_depth:
            raise ExpressionError(f"nests deeper than {bounds.max_depth} steps (a runaway recursion?)")
        steps[0] += 1
        if not steps[0] & 63:  # the clock every 64 steps: a step is microseconds, a clock read is not free
            _check_time(started, bounds)

    def leave(_expr: Any, _input: Any, env: Any, result: Any) -> None:
        if counted and counted.pop():
            depth[0] -= 1
        if isinstance(result, str | list) and len(result) > bounds.max_items:
            raise ExpressionError(f"builds a value of {len(result):,} items, over the limit of {bounds.max_items:,}")

    bindings: dict[str, Any] = dict(variables)
    bindings.update(_functions_for(bounds, id_seed))
    bindings["__evaluate_entry"] = entry
    bindings["__evaluate_exit"] = leave
    try:
        result = compiled.evaluate(None, bindings)
        return _plain(result, bounds)
    except ExpressionError:
        raise
    except RecursionError as exc:
        raise ExpressionError("nests too deep (a runaway recursion?)") from exc
    except Exception as exc:  # JException, and Python's own (ZeroDivisionError, OverflowError...)
        raise ExpressionError(_message(exc, text)) from exc


def _check_time(started: float, bounds: Bounds) -> None:
    if (time.monotonic() - started) * 1000 > bounds.timeout_ms:
        raise ExpressionError(f"ran longer than {bounds.timeout_ms:g} ms")


def _message(exc: Exception, text: str) -> str:
    if isinstance(exc, ZeroDivisionError):
        return "divides by zero"
    where = getattr(exc, "location", None)
    shown = text if len(text) <= 120 else text[:117] + "..."
    at = f" at character {where}" if isinstance(where, int) and where >= 0 else ""
    return f"{exc}{at} (in {shown!r})"


def _plain(value: Any, bounds: Bounds) -> Any:
    """A JSONata result as plain JSON: its sequences as lists, copies (never the state's own containers), no
    functions, no NaN or infinity."""
    if value is None or value is _utils.Utils.NULL_VALUE:
        return None
    if isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ExpressionError(f"gives {value}, which is not a JSON number (a division by zero?)")
        return value
    if isinstance(value, dict):
        return {str(key): _plain(inner, bounds) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        if len(value) > bounds.max_items:
            raise ExpressionError(f"gives a list of {len(value):,} items, over the limit of {bounds.max_items:,}")
        return [_plain(inner, bounds) for inner in value]
    raise ExpressionError(f"gives a {type(value).__name__}, which is not JSON (a function not called?)")


class _Expression(jsonata.Jsonata):  # type: ignore[misc]
    """JSONata whose arithmetic and ranges keep to simia's rules (the module docstring)."""

    def evaluate_numeric_expression(self, lhs: Any, rhs: Any, op: str | None) -> Any:
        for side in (lhs, rhs):
            if side is not None and (isinstance(side, bool) or not isinstance(side, int | float)):
                return super().evaluate_numeric_expression(lhs, rhs, op)  # its type error
        if lhs is None or rhs is None:
            return None
        if op == "+":
            return lhs + rhs
        if op == "-":
            return lhs - rhs
        if op == "*":
            return lhs * rhs
        if op == "/":
            return lhs / rhs
        remainder = math.fmod(lhs, rhs)
        return int(remainder) if isinstance(lhs, int) and isinstance(rhs, int) else remainder

    def evaluate_range_expression(self, lhs: Any, rhs: Any) -> Any:
        if isinstance(lhs, int) and isinstance(rhs, int) and rhs - lhs >= Bounds.max_items:
            raise ExpressionError(f"a range of {rhs - lhs + 1:,} items is over the limit of {Bounds.max_items:,}")
        return super().evaluate_range_expression(lhs, rhs)


def _typed_call(m: Callable[..., Any], nargs: int, args: Any) -> Any:
    """JSONata's function call (missing arguments are undefined), without its turning a whole float into an int:
    `$sum([1.5, 2.5])` is 4.0, as Python sums it. (JSONata's own conversion changes nothing else.)"""
    call_args = list(args)
    while len(call_args) < nargs:
        call_args.append(None)
    return m(*call_args)


_functions.Functions._call = staticmethod(_typed_call)  # type: ignore[method-assign]


def _functions_for(bounds: Bounds, id_seed: Callable[[], str] | None) -> dict[str, Any]:
    """simia's functions, bound per evaluation ($newid draws from this call's seed)."""
    drawn: list[int] = [0]

    def pointer(*tokens: Any) -> str:
        """`$pointer("orders", $args.order_id, "status")` -> "/orders/%23W1/status": a JSON Pointer from tokens
        (each escaped as RFC 6901 says; a whole float is written as an integer)."""
        parts = []
        for token in tokens:
            if isinstance(token, list):  # JSONata passes a sequence where one value was meant
                token = token[0] if len(token) == 1 else token
            if isinstance(token, float) and token.is_integer():
                token = int(token)
            if not isinstance(token, str | int) or isinstance(token, bool):
                raise ExpressionError(f"$pointer takes strings and numbers, not {type(token).__name__}")
            parts.append(str(token).replace("~", "~0").replace("/", "~1"))
        return "".join("/" + part for part in parts)

    def newid(prefix: Any = "", length: Any = 8, taken: Any = None, alphabet: Any = "0123456789") -> str:
        """`$newid("#W", 7, $state.orders)` -> "#W" and 7 characters of `alphabet`, drawn from the episode's seed
        and step (the same call on the same episode gives the same id), never a key of `taken` (an object) or a
        member of it (an array)."""
        if id_seed is None:
            raise ExpressionError("$newid needs the call's seed (it is not available here)")
        if not isinstance(prefix, str) or not isinstance(alphabet, str) or not alphabet:
            raise ExpressionError("$newid(prefix, length, taken, alphabet): prefix and alphabet are strings")
        if isinstance(length, float) and length.is_integer():
            length = int(length)
        if not isinstance(length, int) or isinstance(length, bool) or not 1 <= length <= 64:
            raise ExpressionError("$newid's length is a whole number from 1 to 64")
        used = set(taken) if isinstance(taken, dict | list) else set()
        seed = id_seed()
        for attempt in range(1000):
            drawn[0] += 1
            digest = hashlib.sha256(f"{seed}|{drawn[0]}|{attempt}".encode()).digest()
            number = int.from_bytes(digest, "big")
            chars = []
            for _ in range(length):
                number, index = divmod(number, len(alphabet))
                chars.append(alphabet[index])
            candidate = prefix + "".join(chars)
            if candidate not in used:
                return candidate
        raise ExpressionError("$newid found no free id in 1,000 draws: give it a longer length")

    def round_(number: Any, digits: Any = 0) -> Any:
        """Python's round: the binary value rounded (2.675 -> 2.67), a float staying a float."""
        if number is None:
            return None
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise ExpressionError(f"$round takes a number, not {type(number).__name__}")
        if isinstance(digits, float) and digits.is_integer():
            digits = int(digits)
        if not isinstance(digits, int) or isinstance(digits, bool):
            raise ExpressionError("$round's digits are a whole number")
        return round(number, digits) if isinstance(number, float) or digits < 0 else number

    def float_(value: Any) -> Any:
        """Python's float: `$float(3)` is 3.0 (a whole number written as a float, as `float()` gives it)."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ExpressionError(f"$float takes a number or a numeric string, not {type(value).__name__}")
        try:
            return float(value)
        except ValueError as exc:
            raise ExpressionError(f"$float: {value!r} is not a number") from exc

    def string(value: Any = None, prettify: Any = False) -> Any:
        """JSONata's $string, with a number written as Python writes it (`$string(2.0)` is "2.0")."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                raise ExpressionError(f"$string: {value} is not a JSON number")
            return str(value)
        return _functions.Functions.string(value, bool(prettify))

    def number(value: Any = None) -> Any:
        """JSONata's $number, with a numeral read as JSON reads it: "123" is 123, "1.5" and "1.0" floats."""
        if isinstance(value, str) and re.fullmatch(r"-?(0|[1-9][0-9]*)", value.strip()):
            return int(value)
        return _functions.Functions.number(value)

    return {
        "pointer": jsonata.Jsonata.JLambda(pointer),
        "number": jsonata.Jsonata.JLambda(number),
        "newid": jsonata.Jsonata.JLambda(newid),
        "round": jsonata.Jsonata.JLambda(round_),
        "float": jsonata.Jsonata.JLambda(float_),
        "string": jsonata.Jsonata.JLambda(string),
    }
