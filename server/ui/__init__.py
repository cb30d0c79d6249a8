"""The episode viewer: server-rendered HTML pages under `/ui` over a `Store`, with a little vendored JavaScript.

Runs (a filtered, sorted, paged table and per-task rewards), an episode (timeline, progress curve, state diffs,
verdict, transcript, fork lineage, live updates), the state at any step, and worlds (tools, tasks, reward per task).
"""

from .routes import COOKIE, PUBLIC_PATHS, Viewer, cookie_token

__all__ = ["COOKIE", "PUBLIC_PATHS", "Viewer", "cookie_token"]
