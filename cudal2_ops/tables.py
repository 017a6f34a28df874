"""Per-GPU kernel tables: `kernels/<arch_dir>/<gpu_slug>.json`, versioned data with validators.

A table maps `<layout>_<dtype>_<M>_<N>_<K>` to the kernel that beat cuBLASLt on that problem (with its runtime knobs
and the measured times). A table whose header does not match the running GPU/toolkit is rejected with a warning and
the dispatcher uses cuBLASLt.
"""
from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_VERSION = 1
PACKAGE_TABLES = Path(__file__).resolve().parent / "tables"
REPO_TABLES = Path(__file__).resolve().parent.parent / "kernels"  # editable installs and source checkouts


def gpu_slug(gpu_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia_h100_80gb_hbm3' (the table's file stem)."""
    return re.sub(r"[^a-z0-9]+", "_", gpu_name.lower()).strip("_")


def arch_dir(capability: tuple[int, int]) -> str:
    """The kernels folder for a compute capability: sm90 for Hopper, sm80 otherwise."""
    return "sm90" if capability[0] == 9 else "sm80"


def entry_key(layout: str, dtype: str, m: int, n: int, k: int) -> str:
    """The table key of one problem, e.g. 'nt_fp16_4096_4096_4096'."""
    return f"{layout}_{dtype}_{m}_{n}_{k}"


def parse_key(key: str) -> tuple[str, str, int, int, int]:
    """Inverse of entry_key."""
    layout, dtype, m, n, k = key.split("_")
    if layout not in ("nn", "nt") or dtype not in ("fp16", "bf16"):
        raise ValueError(f"bad table key {key!r}: expected <nn|nt>_<fp16|bf16>_M_N_K")
    return layout, dtype, int(m), int(n), int(k)


@dataclass
class DeviceFacts:
    """What a table header is validated against."""

    gpu_name: str
    sm_count: int
    capability: tuple[int, int]
    cuda: str

    @classmethod
    def of(cls, device: int) -> "DeviceFacts":
        import torch

        props = torch.cuda.get_device_properties(device)
        return cls(props.name, props.multi_processor_count, (props.major, props.minor), torch.version.cuda or "")


@dataclass
class Table:
    """A loaded table: header, entries and where it came from."""

    path: Path
    header: dict
    entries: dict = field(default_factory=dict)

    @property
    def nearest_m_up(self) -> bool:
        """Whether the search validated the nearest-tuned-M rule for misses on this table."""
        return bool(self.header.get("rules", {}).get("nearest_m_up", False))


def header_problems(header: dict, facts: DeviceFacts) -> list[str]:
    """Why a table header does not fit this device (empty when it does)."""
    problems = []
    if header.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"schema_version {header.get('schema_version')} != {SCHEMA_VERSION}")
    if header.get("gpu_name") != facts.gpu_name:
        problems.append(f"gpu_name {header.get('gpu_name')!r} != {facts.gpu_name!r}")
    if header.get("sm_count") != facts.sm_count:
        problems.append(f"sm_count {header.get('sm_count')} != {facts.sm_count}")
    table_cuda, running_cuda = str(header.get("cuda", "")), facts.cuda
    if table_cuda.split(".")[0] != running_cuda.split(".")[0]:
        problems.append(f"CUDA {table_cuda} (table) vs {running_cuda} (running): different major versions")
    return problems


def find_table_file(facts: DeviceFacts) -> Path | None:
    """CUDAL2_TABLE if set, else the installed table for this GPU, else the repository's."""
    if os.environ.get("CUDAL2_TABLE"):
        return Path(os.environ["CUDAL2_TABLE"])
    name = Path(arch_dir(facts.capability)) / f"{gpu_slug(facts.gpu_name)}.json"
    for root in (PACKAGE_TABLES, REPO_TABLES):
        if (root / name).exists():
            return root / name
    return None


def read_table(path: Path) -> Table:
    """Parses a table file (no validation against a device)."""
    data = json.loads(Path(path).read_text())
    if "header" not in data or "entries" not in data:
        raise ValueError(f"{path}: a table needs 'header' and 'entries'")
    for key in data["entries"]:
        parse_key(key)
    return Table(Path(path), data["header"], data["entries"])


def load_table_for(facts: DeviceFacts) -> Table | None:
    """The validated table for a device, or None (with a warning when a table exists but does not fit)."""
    path = find_table_file(facts)
    if path is None:
        return None
    try:
        table = read_table(path)
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        warnings.warn(f"cudal2_ops: ignoring table {path}: {exc}; using cuBLASLt", RuntimeWarning, stacklevel=2)
        return None
    problems = header_problems(table.header, facts)
    if problems:
        warnings.warn(f"cudal2_ops: ignoring table {path} ({'; '.join(problems)}); using cuBLASLt", RuntimeWarning,
                      stacklevel=2)
        return None
    return table


def table_rows(table: Table) -> list[tuple]:
    """Rows for the dispatcher: (layout, dtype, m, n, k, kernel, splits, swizzle, raster)."""
    rows = []
    for key, entry in table.entries.items():
        layout, dtype, m, n, k = parse_key(key)
        rows.append((layout, dtype, m, n, k, entry["kernel"], int(entry.get("splits", 0)),
                     int(entry.get("swizzle", 0)), int(entry.get("raster", 0))))
    return rows


# Tables installed per device in this process (for explain/info).
INSTALLED: dict[int, Table | None] = {}


def install_table(device: int) -> None:
    """Loads, validates and installs the table of `device` into the dispatcher (called once per device)."""
    from cudal2_ops import tuning_cache
    from cudal2_ops._extension import _C

    if not INSTALLED:  # first device seen: also reuse earlier processes' cuBLASLt tuning
        tuning_cache.load_into_dispatcher()
    table = load_table_for(DeviceFacts.of(device))
    INSTALLED[device] = table
    if table is None or _C is None:
        return
    missing = _C.set_table(device, table_rows(table), table.nearest_m_up)
    if missing:
        warnings.warn(f"cudal2_ops: table {table.path} names {len(missing)} kernels that are not built "
                      f"(e.g. {missing[0]}); those shapes use cuBLASLt", RuntimeWarning, stacklevel=2)
