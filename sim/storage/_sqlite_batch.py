"""A batch executor for one SQLite connection: concurrent jobs share a transaction, answered after its commit.

One connection, used by one thread at a time (SQLite 3.40 corrupts WAL databases
when two connections write or checkpoint at once). Concurrent requests are
grouped: a batch runs its jobs inside one transaction, commits once, and only
then answers them - so a reply reports only what is committed, and many
concurrent calls share one fsync. A failing job is undone alone (the batch is
rerun with a savepoint per job).

Batches run on a writer thread; with `synchronous` NORMAL or OFF (a commit does
not wait for the disk) small indexed reads and writes ("point" jobs: a call's
event, an episode's row) run instead as one batch per event-loop iteration on
the loop's own thread, which is cheaper than two thread hops. The executor knows
nothing of what the jobs store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.request import pathname2url

from ..errors import StoreUnavailable

__all__ = ["CHECKPOINT_EVERY", "BatchExecutor"]

T = TypeVar("T")
log = logging.getLogger("simia.store")
CHECKPOINT_EVERY = 1000
"""Inline commits between two WAL checkpoints (SQLite's own, every 1000 pages, would run on the event loop)."""


class _Job:
    __slots__ = ("error", "fn", "future", "loop", "result")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any], loop: asyncio.AbstractEventLoop) -> None:
        self.fn = fn
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.result: Any = None
        self.error: BaseException | None = None


class BatchExecutor:
    """Runs functions of a SQLite connection in committed transactions, grouped, from asyncio code.

    Args:
        path: the database file (created when missing); ":memory:" for tests.
        synchronous: SQLite `synchronous` pragma. FULL (default) survives power loss;
            NORMAL survives process crashes only, and lets point jobs run inline.
        setup: run once on the new connection before any job (the schema and its migrations).
        read_only: open the file read-only (it must exist); every write then fails (`StoreUnavailable`).
        page_size: the page size of a new file (an existing one keeps its own); SQLite's default is 4096.
    """

    inline_allowed = True
    """Whether point jobs may run inline on the event loop (a variant that commits differently turns it off)."""

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "FULL",
        setup: Callable[[sqlite3.Connection], None] | None = None,
        read_only: bool = False,
        page_size: int | None = None,
    ) -> None:
        self.path = path
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        if read_only:
            uri = f"file:{pathname2url(str(Path(path).resolve()))}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        else:
            self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            if page_size is not None:  # a new file's only (an existing one keeps its own)
                self._conn.execute(f"PRAGMA page_size={int(page_size)}")
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={synchronous}")
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute("PRAGMA busy_timeout=5000")
        if setup is not None:
            setup(self._conn)
        self._lock = threading.Lock()  # held by whoever uses the connection: the writer thread or an inline batch
        self._inline: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        self._inline_ok = synchronous.upper() in ("NORMAL", "OFF") and self.inline_allowed and not read_only
        if self._inline_ok:  # checkpoints (which write the database file and sync it) move to the writer thread
            self._conn.execute("PRAGMA wal_autocheckpoint=0")
        self._inline_commits = 0
        self._conn_closed = False
        self._thread = threading.Thread(target=self._writer, name="simia-store-writer", daemon=True)
        self._closed = False
        self._thread.start()

    async def run(self, fn: Callable[[sqlite3.Connection], T], *, point: bool = False) -> T:
        """Run `fn` on the connection inside a transaction; return (or raise) once that transaction committed.

        Args:
            fn: called with the connection on the thread that holds it; must not commit.
            point: a small, indexed read or write, which may run inline on the event loop
                when commits do not wait for the disk.

        Raises:
            RuntimeError: the executor is closed.
            StoreUnavailable: the disk refused the transaction (full, read-only, I/O error); nothing of it stored.
            Whatever `fn` raised (its work undone alone).
        """
        if self._closed:
            raise RuntimeError("the store is closed")
        loop = asyncio.get_running_loop()
        job = _Job(fn, loop)
        if point and self._inline_ok:
            pending = self._inline.get(loop)
            if pending is None:
                pending = self._inline[loop] = []
                loop.call_soon(self._flush, loop)
            pending.append(job)
        else:
            self._queue.put(job)
        result: T = await job.future  # a cancelled caller leaves the job to run; its answer is dropped
        return result

    async def close(self) -> None:
        """Finish the queued jobs, close the connection; later jobs are refused."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)

    # The writer thread calls these two; a variant that commits differently overrides them.

    def _next(self) -> _Job | None:
        """The next queued job (None: close), waiting as long as it takes."""
        return self._queue.get()

    def _execute(self, conn: sqlite3.Connection, work: list[_Job]) -> None:
        """Run `work` and commit it, with the connection's lock held."""
        _run_batch(conn, work)

    def _writer(self) -> None:
        conn = self._conn
        while True:
            first = self._next()
            if first is None:
                break
            jobs = self._take_waiting(first)
            checkpoints = [job for job in jobs if job.fn is _checkpoint]
            work = [job for job in jobs if job.fn is not _checkpoint]
            with self._lock:
                if checkpoints:
                    _checkpoint(conn)
                if work:
                    self._execute(conn, work)
            by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
            for job in jobs:
                by_loop.setdefault(job.loop, []).append(job)
            for loop, group in by_loop.items():  # one wake-up per loop and batch, not per job
                _answer(loop, group)
        with self._lock:
            if conn.in_transaction:
                conn.execute("COMMIT")
            conn.close()
            self._conn_closed = True
        for job in self._take_waiting(None):  # jobs that arrived after the close: refuse them
            job.error = None if job.fn is _checkpoint else RuntimeError("the store is closed")
            _answer(job.loop, [job])

    def _take_waiting(self, first: _Job | None) -> list[_Job]:
        """`first` and the jobs waiting behind it (up to 256), stopping at the close marker."""
        jobs = [first] if first is not None else []
        while len(jobs) < 256:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                self._queue.put(None)
                break
            jobs.append(job)
        return jobs

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the jobs this loop queued for inline execution, as one transaction, on the loop's thread.

        Used when a commit does not wait for the disk (synchronous NORMAL or OFF): a batch of point
        reads and writes then costs less than the two thread hops. When the writer thread holds
        the connection, the jobs go to it instead.
        """
        jobs = self._inline.pop(loop, [])
        if not jobs:
            return
        if not self._lock.acquire(blocking=False):
            if self._closed:
                _fail(jobs, RuntimeError("the store is closed"))
                return
            for job in jobs:
                self._queue.put(job)
            return
        try:
            if self._conn_closed:
                _fail(jobs, RuntimeError("the store is closed"))
                return
            _run_batch(self._conn, jobs)
        finally:
            self._lock.release()
        self._inline_commits += 1
        if self._inline_commits >= CHECKPOINT_EVERY:
            self._inline_commits = 0
            self._queue.put(_Job(_checkpoint, loop))
        _resolve_all(jobs)


def _run_jobs(conn: sqlite3.Connection, jobs: list[_Job]) -> bool:
    """Run each job in its own savepoint: a failing job is rolled back alone and keeps its error.

    Returns:
        False when SQLite rolled back the whole transaction itself (it may, on a full disk or an I/O
        error): the jobs that had run are undone too, and every job then carries the error.
    """
    for i, job in enumerate(jobs):
        conn.execute("SAVEPOINT job")
        try:
            job.result = job.fn(conn)
            conn.execute("RELEASE job")
        except BaseException as exc:
            job.error = _classified(exc)
            if not conn.in_transaction:
                _fail_undone(jobs[:i] + jobs[i + 1 :], job.error)
                return False
            conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
    return True


def _run_batch(conn: sqlite3.Connection, jobs: list[_Job]) -> None:
    """Run `jobs` in one transaction and commit it: many jobs share one commit (and one fsync).

    The common case runs them back to back. When one fails, the transaction is rolled
    back and the batch runs again with a savepoint per job, so the failing job is
    undone alone and the others commit. A transaction that cannot begin or commit
    (disk full, read-only database) fails every job with `StoreUnavailable` and leaves
    the connection ready for the next batch: the writer thread never dies of it.
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for job in jobs:
                job.result = job.fn(conn)
        except BaseException:
            _rollback(conn)
            conn.execute("BEGIN IMMEDIATE")
            if not _run_jobs(conn, jobs):
                return
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        _fail_undone(jobs, _classified(exc))
        _rollback(conn)


def _rollback(conn: sqlite3.Connection) -> None:
    """End the open transaction, if SQLite has not ended it already."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:  # the disk refuses even this: SQLite rolls back the journal on the next use
            log.warning("ROLLBACK failed; the next transaction recovers the journal", exc_info=True)


def _fail_undone(jobs: list[_Job], error: BaseException) -> None:
    """Mark jobs whose work a failed transaction undid: none of them may be answered as done."""
    for job in jobs:
        job.result = None
        job.error = job.error or error


_UNAVAILABLE = {
    sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
}


def _classified(exc: BaseException) -> BaseException:
    """`exc`, or `StoreUnavailable` when it is SQLite refusing for a reason of the disk, not of the job."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(exc, sqlite3.Error) and code is not None and code & 0xFF in _UNAVAILABLE:
        error = StoreUnavailable(f"the database refused the write ({exc}); nothing of it was stored")
        error.__cause__ = exc
        return error
    return exc


def _checkpoint(conn: sqlite3.Connection) -> None:
    """Copy the WAL back into the database file (on the writer thread, off the event loop)."""
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    except sqlite3.Error as exc:
        log.warning("WAL checkpoint failed (the next one retries): %s", exc)


def _fail(jobs: list[_Job], error: BaseException) -> None:
    for job in jobs:
        job.error = error
    _resolve_all(jobs)


def _answer(loop: asyncio.AbstractEventLoop, jobs: list[_Job]) -> None:
    """Resolve `jobs` on their loop's thread (from the writer thread)."""
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for these answers any more
        loop.call_soon_threadsafe(_resolve_all, jobs)


def _resolve_all(jobs: list[_Job]) -> None:
    for job in jobs:
        if job.future.done():
            continue
        if job.error is not None:
            job.future.set_exception(job.error)
        else:
            job.future.set_result(job.result)
