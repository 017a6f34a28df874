"""The Python packages cudal2 needs, by extra: one list read by setup.py (extras_require) and by scripts/install.sh.

    python -m build_tools.requirements build bench test            # requirements of these extras not importable here
    python -m build_tools.requirements --no-deps build             # those of them pip installs without dependencies
"""
from __future__ import annotations

import argparse
import importlib.util
import re

from build_tools.kernel_lib import CUTLASS_PIN

CORE = ["torch>=2.4", "numpy"]
CUTLASS = f"nvidia-cutlass=={CUTLASS_PIN}"
EXTRAS = {
    "build": ["ninja", CUTLASS, "setuptools>=64", "wheel"],  # wheel: bdist_wheel of setuptools < 70.1 (venvs)
    "bench": ["matplotlib", "tqdm"],
    "test": ["pytest", "hypothesis"],
    "ray": ["ray"],  # the search's Ray evaluation backend
}
# Only its headers are used: its Python generator's dependencies (cuda-python, scipy, ...) are not needed.
WITHOUT_DEPENDENCIES = {CUTLASS}
IMPORT_NAMES = {"nvidia-cutlass": "cutlass_library"}


def project_name(requirement: str) -> str:
    """The project a requirement names: "nvidia-cutlass==4.2.0.0" -> "nvidia-cutlass"."""
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]


def import_name(requirement: str) -> str:
    """The module a requirement provides ("nvidia-cutlass==4.2.0.0" -> "cutlass_library")."""
    name = project_name(requirement)
    return IMPORT_NAMES.get(name, name.replace("-", "_"))


def requirements(extras: list[str]) -> list[str]:
    """The requirements of `extras`, in order, without repeats; raises ValueError naming an unknown extra."""
    unknown = [e for e in extras if e not in EXTRAS]
    if unknown:
        raise ValueError(f"unknown extra(s) {unknown}; known: {sorted(EXTRAS)}")
    return list(dict.fromkeys(req for extra in extras for req in EXTRAS[extra]))


def missing(extras: list[str], without_dependencies: bool = False) -> list[str]:
    """Requirements of `extras` whose module cannot be imported here: those pip installs with their dependencies,
    or (without_dependencies=True) those it installs without. Versions are not compared: present means present."""
    return [req for req in requirements(extras)
            if (req in WITHOUT_DEPENDENCIES) == without_dependencies and importlib.util.find_spec(import_name(req)) is None]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m build_tools.requirements", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-deps", action="store_true", help="only the requirements installed without dependencies")
    parser.add_argument("extras", nargs="+", metavar="EXTRA", choices=sorted(EXTRAS), help=f"one of {sorted(EXTRAS)}")
    args = parser.parse_args()
    print(" ".join(missing(args.extras, args.no_deps)))


if __name__ == "__main__":
    main()
