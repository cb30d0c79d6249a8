"""Virtual environments of the trainers, for tests of simia's trainer adapters and protocols.

Trainers pin `mcp<2` or `openai<3` (see the notes on trainers), so they cannot share simia's venv: a test runs the
trainer's own client in a venv made here, with the trainer's own pins, and talks to a live `simia serve` over
HTTP. A venv is built once per (name, Python, packages) and reused by later runs (and by the other xdist
workers, which wait on a file lock while one builds it).

    python = trainer_venv("openenv", ["openenv==0.10.0"])  # the venv's python
    subprocess.run([str(python), "script.py", server.url], check=True)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["VENVS_DIR", "python_for", "trainer_venv"]

ROOT = Path(__file__).resolve().parent.parent
VENVS_DIR = Path(os.environ.get("SIMIA_TRAINER_VENVS", ROOT / ".venvs"))
"""Where the trainers' venvs are kept between runs (`SIMIA_TRAINER_VENVS` overrides; ignored by git)."""


def python_for(version: str) -> str | None:
    """An interpreter of Python `version` ("3.12") on this machine (pyenv's, or one on the PATH), if any."""
    if sys.version_info[:2] == tuple(int(p) for p in version.split(".")):
        return sys.executable
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        listed = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True, check=False).stdout
        for name in sorted((v.strip() for v in listed.splitlines()), reverse=True):
            if name.startswith(version + "."):
                found = subprocess.run(
                    [pyenv, "which", "python"], capture_output=True, text=True, check=False,
                    env={**os.environ, "PYENV_VERSION": name},
                ).stdout.strip()  # fmt: skip
                if found:
                    return found
    return shutil.which(f"python{version}")


def trainer_venv(name: str, packages: Sequence[str], *, python: str | None = None, timeout: float = 1800) -> Path:
    """The python of a venv holding `packages` (pip requirement strings or local paths), built on first use.

    Args:
        name: names the venv's folder (the trainer).
        packages: what to install; a change makes a new venv (the key hashes them and the interpreter).
        python: the interpreter to build it from (default: this one).

    Raises:
        RuntimeError: pip failed (its output's tail is in the message); the half-built venv is removed.
    """
    base = python or sys.executable
    key = hashlib.sha256("\n".join([base, *packages]).encode()).hexdigest()[:10]
    folder = VENVS_DIR / f"{name}-{key}"
    ready = folder / ".simia-ready"
    VENVS_DIR.mkdir(parents=True, exist_ok=True)
    with open(VENVS_DIR / f".{name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            shutil.rmtree(folder, ignore_errors=True)
            subprocess.run([base, "-m", "venv", str(folder)], check=True)
            pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            done = subprocess.run([*pip, *packages], capture_output=True, text=True, timeout=timeout, check=False)
            if done.returncode != 0:
                shutil.rmtree(folder, ignore_errors=True)
                raise RuntimeError(f"pip install {' '.join(packages)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
            ready.write_text("\n".join(packages))
    return folder / "bin" / "python"
