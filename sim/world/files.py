"""Writing world files safely: a world folder appears whole and valid, or not at all.

`write_world` writes every file into a temporary folder beside the target, loads it with
the same loader `simia validate` uses, and only then moves it into place; an existing folder
is replaced only with `force`. `atomic_write_text` replaces one file the same way (temp file
+ `os.replace`), for commands that update files inside a world (state, tasks).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from ..errors import WorldError, WorldExistsError, WorldIssue
from .loader import load_world
from .model import World

__all__ = ["atomic_write_text", "check_target", "write_world"]


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` so that readers see the old file or the new one, never a part.

    Args:
        path: the file to create or replace; its folder must exist.
        text: the whole new content.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def check_target(folder: str | Path, *, force: bool = False) -> Path:
    """The folder a world will be written to, checked before any work is done.

    Raises:
        WorldExistsError: the folder exists and `force` is false, or the path is a file.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise WorldExistsError(f"{str(folder)!r} is a file; give a folder path for the world")
    if folder.exists() and not force and any(folder.iterdir()):
        raise WorldExistsError(f"{str(folder)!r} already exists; pass --force to replace it, or --out another folder")
    return folder


def write_world(folder: str | Path, files: Mapping[str, str], *, force: bool = False) -> World:
    """Write a world folder from `files` (relative path -> text), checked by the loader before it appears.

    Args:
        folder: where the world goes; its parent folders are created.
        files: e.g. {"world.yaml": ..., "tools.json": ..., "examples/probe_1.json": ...}.
        force: replace an existing folder (all of it: state, tasks and examples included).

    Returns:
        The loaded world, with `source` set to `folder`.

    Raises:
        WorldExistsError: the folder exists and `force` is false.
        WorldError: the files do not make a valid world (nothing is written).
        ValueError: a file path leaves the folder.
    """
    folder = check_target(folder, force=force)
    for name in files:
        relative = PurePosixPath(name)
        if relative.is_absolute() or ".." in relative.parts or not relative.parts:
            raise ValueError(f"world file path {name!r} must stay inside the world folder")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        for name, text in files.items():
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
        try:
            world = load_world(staging)
        except WorldError as exc:
            raise _relocated(exc, staging, folder) from None
        _move_into_place(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return world.model_copy(update={"source": str(folder)})


def _move_into_place(staging: Path, folder: Path) -> None:
    """Rename `staging` to `folder`; an existing folder is set aside first and removed only after the swap."""
    if not folder.exists():
        os.rename(staging, folder)
        _fsync_dir(folder.parent)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".old", dir=folder.parent))
    old.rmdir()
    os.rename(folder, old)
    try:
        os.rename(staging, folder)
    except BaseException:
        os.rename(old, folder)
        raise
    _fsync_dir(folder.parent)
    shutil.rmtree(old, ignore_errors=True)


def _relocated(error: WorldError, staging: Path, folder: Path) -> WorldError:
    """The loader's problems, naming the files where they would have been written, not the temp folder."""
    here, there = str(staging), str(folder)
    issues = [WorldIssue(i.file.replace(here, there, 1), i.path, i.message, i.hint, i.line) for i in error.issues]
    return WorldError(error.world, issues, there)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
