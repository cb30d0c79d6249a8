"""HTML building blocks of the viewer: escaping, the page layout, and small formatters.

Every string that reaches a page passes through `h` (or `json_block`, which escapes too): episode data comes
from agents and models and is untrusted. Pages are plain f-strings over these helpers; there is no template
engine and nothing is fetched from the network (the CSS and JavaScript are served from `static/`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any
from urllib.parse import urlencode

__all__ = [
    "bar",
    "duration",
    "h",
    "json_block",
    "json_inline",
    "page",
    "query_link",
    "reward_badge",
    "status_badge",
    "timestamp",
]


def h(value: Any) -> str:
    """`value` as HTML text: `&`, `<`, `>` and both quotes escaped (safe in text and in quoted attributes)."""
    return escape("" if value is None else str(value), quote=True)


def json_inline(value: Any, limit: int = 160) -> str:
    """Compact JSON of `value`, escaped, cut to `limit` characters with an ellipsis."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return h(text if len(text) <= limit else text[: limit - 1] + "…")


def json_block(value: Any) -> str:
    """Indented JSON of `value` in a `<pre>`, escaped."""
    return f'<pre class="json">{h(json.dumps(value, ensure_ascii=False, indent=2))}</pre>'


def timestamp(t: float | None) -> str:
    """A UTC time as `YYYY-MM-DD HH:MM:SS`, with the full ISO form as a tooltip."""
    if t is None:
        return ""
    shown = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
    return f'<time datetime="{h(shown.replace(" ", "T"))}Z">{h(shown)}</time>'


def duration(seconds: float) -> str:
    """A duration for people: `850 ms`, `12.3 s`, `4.2 min`, `1.5 h`."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def status_badge(status: str) -> str:
    return f'<span class="badge status-{h(status)}">{h(status)}</span>'


def reward_badge(reward: int | float | None) -> str:
    if reward is None:
        return '<span class="badge reward-none" title="not judged">–</span>'
    kind = "pass" if reward >= 1 else "fail"
    return f'<span class="badge reward-{kind}">{h(reward)}</span>'


def bar(share: float | None, label: str) -> str:
    """A bar (`<meter>`) of `share` (0..1) with `label` beside it; an empty bar when `share` is None."""
    value = 0.0 if share is None else max(0.0, min(1.0, share))
    return f'<meter class="bar" min="0" max="1" value="{value:.4f}" title="{h(label)}"></meter> {h(label)}'


def query_link(base: str, params: Mapping[str, Any], **changes: Any) -> str:
    """`base` with `params` updated by `changes` (a None value drops the key), escaped for an href."""
    merged = {**params, **changes}
    kept = {k: v for k, v in merged.items() if v not in (None, "")}
    return h(f"{base}?{urlencode(kept)}" if kept else base)


def page(title: str, body: str, *, nav: str = "runs", extra_head: str = "", data: Iterable[str] = ()) -> str:
    """A whole HTML document: head with the vendored CSS and JavaScript, the top navigation, `body`."""
    links = "".join(
        f'<a href="{href}"{" aria-current=page" if key == nav else ""}>{label}</a>'
        for key, href, label in (("runs", "/ui", "Runs"), ("worlds", "/ui/worlds", "Worlds"))
    )
    attrs = " ".join(data)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{h(title)} · simia</title>
<link rel="stylesheet" href="/ui/static/viewer.css">
<script src="/ui/static/viewer.js" defer></script>{extra_head}
</head><body {attrs}>
<header class="top"><a class="brand" href="/ui">simia</a><nav>{links}</nav>
<span class="keys" title="keyboard">j/k move · Enter open · / filter · u up</span></header>
<main>
{body}
</main></body></html>
"""
