"""Protocol sessions kept in memory (ORS, OpenEnv), fair between principals.

A `SessionBook` keeps sessions by id, least recently used first, under two caps: one per principal and one for the
server. A principal over either takes room only from its own idle sessions (the oldest first; `idle` says which:
one with no episode in progress), never from another principal's: a flood of bare sessions by one token rotates
within that token's share, and another token's rollout keeps its session. When a principal has no idle session to
give up, the new session is refused with `TooManySessions` (429, Retry-After), naming the limit and its flag.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from .errors import ApiError

__all__ = ["SessionBook", "TooManySessions"]

S = TypeVar("S")


class TooManySessions(ApiError):
    status = 429
    code = "too_many_sessions"

    def __init__(self, message: str, retry_after: int = 30) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SessionBook(Generic[S]):
    """Sessions by id, each a principal's.

    Args:
        kind: what the sessions are, for messages ("ORS sessions").
        total: the most the server keeps (of every principal together).
        per_principal: the most one principal keeps.
        flag: the `simia serve` flag that sets `per_principal`, named when a principal reaches it.
        idle: whether a session may be given up for a new one of its principal's (no episode in progress).
    """

    def __init__(self, kind: str, *, total: int, per_principal: int, flag: str, idle: Callable[[S], bool]) -> None:
        self.kind = kind
        self.total = total
        self.per_principal = per_principal
        self.flag = flag
        self.idle = idle
        self._all: OrderedDict[str, tuple[str, S]] = OrderedDict()
        self._mine: dict[str, OrderedDict[str, None]] = {}

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, sid: object) -> bool:
        return sid in self._all

    def values(self) -> Iterator[S]:
        return (session for _, session in self._all.values())

    def get(self, sid: str) -> S | None:
        """The session `sid`, marked as just used; None when there is none."""
        found = self._all.get(sid)
        if found is None:
            return None
        self._all.move_to_end(sid)
        self._mine[found[0]].move_to_end(sid)
        return found[1]

    def pop(self, sid: str) -> S | None:
        found = self._all.pop(sid, None)
        if found is None:
            return None
        mine = self._mine[found[0]]
        mine.pop(sid, None)
        if not mine:
            del self._mine[found[0]]
        return found[1]

    def count(self, principal: str) -> int:
        return len(self._mine.get(principal, ()))

    def add(self, sid: str, principal: str, session: S) -> None:
        """Keep `session` as `principal`'s, making room from that principal's own idle sessions where a cap is
        reached.

        Raises:
            TooManySessions: a cap is reached and the principal has no idle session to give up.
        """
        while self.count(principal) >= self.per_principal:
            if not self._give_up(principal):
                raise TooManySessions(
                    f"this token holds {self.count(principal)} {self.kind}, its limit ({self.flag} "
                    f"{self.per_principal}), none of them idle: end or delete one, or raise {self.flag}"
                )
        while len(self._all) >= self.total:
            if not self._give_up(principal):
                raise TooManySessions(
                    f"the server holds its limit of {self.total} {self.kind}, none of them this token's idle ones; "
                    "retry later"
                )
        self._all[sid] = (principal, session)
        self._mine.setdefault(principal, OrderedDict())[sid] = None

    def _give_up(self, principal: str) -> bool:
        """Forget `principal`'s least recently used idle session; False when it has none."""
        for sid in self._mine.get(principal, ()):
            if self.idle(self._all[sid][1]):
                self.pop(sid)
                return True
        return False
