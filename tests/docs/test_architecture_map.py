"""docs/architecture.md names every module of sim/ and server/ (the two sides of the map): a module added without
its room on the map fails here."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sim", "server")


def test_the_architecture_page_names_every_module() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    unnamed = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "__init__.py" and "adapters" not in path.parts and path.name not in page
    ]
    assert unnamed == [], f"docs/architecture.md names no {unnamed}: add each to the map of its layer"
