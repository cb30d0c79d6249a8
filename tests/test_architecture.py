"""The dependency rule holds (import-linter contracts in pyproject), and a wrong import breaks the build."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

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


def test_every_import_contract_is_kept(tmp_path: Path) -> None:
    result = lint_imports(package_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_wrong_import_breaks_the_contracts(tmp_path: Path) -> None:
    tree = package_tree(tmp_path, copied="sim")
    (tree / "simia" / "sim" / "_wrong.py").write_text('"""A deliberate violation."""\n\nimport simia.server\n')
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "sim imports no other simia package and never the MCP SDK BROKEN" in result.stdout
    assert "simia.sim._wrong -> simia.server" in result.stdout
