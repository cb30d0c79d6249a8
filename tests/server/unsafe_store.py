"""An UNSAFE store for the durability test's control: it answers each call before its transaction commits.

The kill -9 test must be able to fail; a server built on `UnsafeStore` acknowledges
calls that a crash then loses, and the test is shown to catch it. Test code only:
production has no way to build this store.
"""

from __future__ import annotations

import queue
import sqlite3
import time

from simia.sim.storage import SqliteStore
from simia.sim.storage._sqlite_batch import BatchExecutor, _Job, _run_jobs

__all__ = ["UnsafeStore"]


class UnsafeExecutor(BatchExecutor):
    """Runs each batch inside one long transaction and answers it at once; commits lazily.

    The transaction commits once it has been open for a second (or for half a second
    when no work arrives), so a kill loses the calls of up to the last second.
    """

    inline_allowed = False  # every job goes through the writer thread, which holds the transaction open
    _since = 0.0  # when the open transaction began

    def _next(self) -> _Job | None:
        while True:
            try:
                return self._queue.get(timeout=0.2)
            except queue.Empty:  # idle: commit a transaction that has waited long enough
                conn = self._conn
                if conn.in_transaction and time.monotonic() - self._since > 0.5:
                    conn.execute("COMMIT")

    def _execute(self, conn: sqlite3.Connection, work: list[_Job]) -> None:
        if not conn.in_transaction:
            conn.execute("BEGIN IMMEDIATE")
            self._since = time.monotonic()
        _run_jobs(conn, work)
        if time.monotonic() - self._since > 1.0:
            conn.execute("COMMIT")


class UnsafeStore(SqliteStore):
    """`SqliteStore` on `UnsafeExecutor`: acknowledges before committing."""

    executor_type = UnsafeExecutor
