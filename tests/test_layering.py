"""The packages' layers, read from every module's imports (lazy ones inside functions included).

cudal2_catalog (kernel identity) sits below everything; cudal2_ops (the user package) imports neither the tools
nor the testing helpers; cudal2_testing sits below benchmarks/ and search/, which do not import each other; studies/
sits on top, imported by nothing.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cudal2_catalog", "cudal2_ops", "cudal2_testing", "search", "benchmarks", "build_tools", "studies")
FORBIDDEN = {
    "cudal2_catalog": {"cudal2_ops", "cudal2_testing", "search", "benchmarks", "build_tools", "studies"},
    "cudal2_ops": {"search", "benchmarks", "build_tools", "cudal2_testing", "studies"},
    "cudal2_testing": {"search", "benchmarks", "build_tools", "studies"},
    "benchmarks": {"search", "studies"},
    "search": {"benchmarks", "studies"},
    "build_tools": {"search", "benchmarks", "cudal2_testing", "studies"},
}


def imported_packages(source: str) -> set[str]:
    """The top-level names of the absolute imports in `source` (relative imports stay inside their package)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_the_import_reader_sees_every_form_of_import():
    source = ("import benchmarks.grid\nfrom search import loop\nfrom . import sibling\n"
              "def f():\n    import studies.findings as s\n    from cudal2_ops._extension import _C\n")
    assert imported_packages(source) == {"benchmarks", "search", "studies", "cudal2_ops"}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_above_it(package):
    files = modules(package)
    assert files, f"{package}/ has no modules"
    offences = []
    for path in files:
        found = imported_packages(path.read_text()) & FORBIDDEN[package]
        offences += [f"{path.relative_to(ROOT)} imports {name}" for name in sorted(found)]
    assert not offences, f"{package} must not import {sorted(FORBIDDEN[package])}: " + "; ".join(offences)


def test_every_package_is_a_layer():
    assert set(FORBIDDEN) | {"studies"} == set(PACKAGES)
    for package in PACKAGES:
        assert (ROOT / package / "__init__.py").exists(), f"{package}/ is not a package"
