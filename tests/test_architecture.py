"""The dependency rule holds (import-linter contracts in pyproject), and a wrong import breaks the build."""

from __future__ import annotations

import ast
import functools
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cli", "sim", "server", "clients", "training", "testing")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter over `tree`/simia (a real package folder, as grimp needs) with the project's contracts."""
    command = [str(Path(sys.executable).with_name("lint-imports")), str(ROOT / "pyproject.toml"), "--no-cache"]
    return subprocess.run(command, cwd=tree, env={"PYTHONPATH": str(tree)}, capture_output=True, text=True, timeout=120)


def package_tree(base: Path, copied: str | None = None) -> Path:
    (base / "simia").mkdir(parents=True)
    (base / "simia" / "__init__.py").touch()
    for name in PACKAGES:
        target = base / "simia" / name
        if name == copied:
            shutil.copytree(ROOT / name, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.symlink_to(ROOT / name)
    return base


@pytest.mark.processes  # lint-imports
def test_every_import_contract_is_kept(tmp_path: Path) -> None:
    result = lint_imports(package_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.processes
def test_a_wrong_import_breaks_the_contracts(tmp_path: Path) -> None:
    tree = package_tree(tmp_path, copied="sim")
    (tree / "simia" / "sim" / "_wrong.py").write_text('"""A deliberate violation."""\n\nimport simia.server\n')
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "sim imports no other simia package and never the MCP SDK BROKEN" in result.stdout
    assert "simia.sim._wrong -> simia.server" in result.stdout


@pytest.mark.processes
def test_a_lower_layer_of_sim_importing_a_higher_one_breaks_the_layers(tmp_path: Path) -> None:
    tree = package_tree(tmp_path, copied="sim")
    wrong = tree / "simia" / "sim" / "storage" / "_wrong.py"
    wrong.write_text('"""A deliberate violation: storage reaches up into the engine."""\n\nimport simia.sim.engine\n')
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "sim's concepts are layers" in result.stdout and "BROKEN" in result.stdout
    assert "simia.sim.storage._wrong -> simia.sim.engine" in result.stdout


SIM_PACKAGES = ("world", "storage", "backends", "engine", "judging", "importers")


def _exported(package: str) -> set[str]:
    module = importlib.import_module(f"simia.sim.{package}")
    return set(module.__all__)


@functools.cache
def _product_imports() -> list[tuple[Path, ast.ImportFrom]]:
    """Every `from ... import` in the product's files, each file parsed once (the test asks for each package)."""
    return [
        (path, node)
        for folder in ("cli", "server", "clients", "training", "testing", "sim")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module is not None
    ]


def _imports_from_outside(package: str) -> list[tuple[str, str, str]]:
    """(file, module, name) of every product import of a `simia.sim.<package>` module from outside it."""
    found = []
    for path, node in _product_imports():
        if path.is_relative_to(ROOT / "sim" / package):
            continue
        module = str(node.module)
        if node.level:  # relative, inside sim: resolve against the file's package
            parts = path.relative_to(ROOT).with_suffix("").parts[:-1]
            module = ".".join(("simia", *parts[: len(parts) - node.level + 1])) + "." + module
        if module.startswith(f"simia.sim.{package}."):
            found += [(str(path.relative_to(ROOT)), module, alias.name) for alias in node.names]
    return found


def test_other_layers_import_a_sim_package_only_through_what_its_init_exports() -> None:
    outside = {p: [(f, m, n) for f, m, n in _imports_from_outside(p) if n not in _exported(p)] for p in SIM_PACKAGES}
    # A backend module may be named when the backend itself is meant (the embedded model's path, the lean
    # HTTP client the benchmark measures): those are the backends package's documented modules.
    allowed_modules = {"simia.sim.backends.local", "simia.sim.backends.replay", "simia.sim.backends.actions"}
    wrong = [x for found in outside.values() for x in found if x[1] not in allowed_modules]
    assert wrong == [], (
        "import these through the package (add the name to its __init__ if it is public):\n"
        + "\n".join(f"{f}: from {m} import {n}" for f, m, n in wrong)
    )


def test_every_deliberate_error_is_a_simia_error() -> None:
    from simia.sim.errors import SimiaError

    loose = []
    for folder in ("cli", "server", "clients", "training", "sim"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.relative_to(ROOT).parts[:2] == ("training", "adapters"):
                continue  # the trainers' adapters are packages of their own, installed without simia
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    bases = {ast.unparse(b) for b in node.bases}
                    if bases & {"Exception", "ValueError", "RuntimeError", "LookupError"}:
                        loose.append(f"{path.relative_to(ROOT)}: {node.name}({', '.join(sorted(bases))})")
    # Retryable is a signal inside a backend, never raised out of Backend.complete (sim/errors.py says so).
    assert loose == ["sim/backends/_base.py: Retryable(Exception)", "sim/errors.py: SimiaError(Exception)"], loose
    assert issubclass(importlib.import_module("simia.server.errors").ApiError, SimiaError)
