"""Every global name a function of the project reads is defined in its module (def, class, assignment, import) or is
a builtin. A refactor once deleted `benchmarks.runner._host_rows` while its call stayed: the offline and server
modes raised NameError on the GPU only, and no CPU test reaches those lines. This checks the whole class statically,
with the compiler's own scopes (`symtable`), on every Python file the project ships or runs."""
from __future__ import annotations

import builtins
import symtable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("benchmarks", "build_tools", "cudal2_catalog", "cudal2_ops", "cudal2_testing", "search", "studies",
            "scripts")
FILES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "results" not in p.parts)


def undefined_globals(source: str, name: str) -> set[str]:
    """Names read as (implicit or declared) globals inside functions and classes that the module never binds."""
    top = symtable.symtable(source, name, "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    if "*" in bound or any(s.get_name() == "*" for s in top.get_symbols()):
        return set()
    missing: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        for child in table.get_children():
            for sym in child.get_symbols():
                if sym.is_referenced() and sym.is_global() and not sym.is_assigned():
                    missing.add(sym.get_name())
            walk(child)
    walk(top)
    return {n for n in missing if n not in bound and not hasattr(builtins, n) and n not in ("__file__", "__name__")}


def test_the_check_finds_a_deleted_helper():
    assert undefined_globals("def f():\n    return helper()\n", "m") == {"helper"}
    assert undefined_globals("import os\ndef helper():\n    pass\ndef f():\n    return helper(), os, len\n", "m") == set()


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_no_function_reads_an_undefined_global(path):
    assert undefined_globals(path.read_text(), str(path)) == set()
