"""The embedded model's loads: one at a time in the process, so llama-cpp's silencing of a load (stdout and
stderr pointed at /dev/null and back) cannot leave the process silent."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from simia.sim.backends import local

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_loads() -> Iterator[None]:
    """No model loaded before the test; after it, the fakes it loaded are forgotten (models loaded before are
    still closed at exit, and load again when next asked for)."""
    loaded = list(local._loaded)
    local._load_once.cache_clear()
    yield
    local._load_once.cache_clear()
    local._loaded[:] = loaded


def test_models_of_different_slots_load_one_at_a_time(monkeypatch: pytest.MonkeyPatch, fresh_loads: None) -> None:
    """A rollout with several episodes in flight loads the agent's, the user's, the simulator's and the judge's
    contexts from different threads at once; each load must hold the process-wide load lock, and a slot loads
    once however many threads ask for it first."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="needs the `local` extra")
    loads: list[tuple[str, bool]] = []

    class Loading:
        def __init__(self, **kwargs: Any) -> None:
            loads.append((str(kwargs["model_path"]), local._loading.locked()))

        def close(self) -> None:
            pass

    monkeypatch.setattr(llama_cpp, "Llama", Loading)
    threads = [threading.Thread(target=local._load, args=("model.gguf", 512, 1, f"slot{i % 4}")) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert loads == [("model.gguf", True)] * 4


@pytest.mark.local_model
@pytest.mark.processes  # the model loads in a process whose stdout is a pipe, as in `simia rollout | tee`
def test_after_concurrent_loads_a_piped_process_still_prints() -> None:
    pytest.importorskip("llama_cpp", reason="needs the `local` extra")
    script = (
        "import threading\n"
        "from simia.sim.backends.local import LocalBackend\n"
        "models = [LocalBackend(slot=f's{i}', n_ctx=1024) for i in range(4)]\n"
        "threads = [threading.Thread(target=lambda m=m: m.llama) for m in models]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print('table on stdout')\n"
        "import sys; print('progress on stderr', file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "table on stdout\n", "progress on stderr\n")
