"""Per-GPU kernel tables: `kernels/<arch_dir>/<gpu_slug>.json`, versioned data with validators.

A table maps `<layout>_<dtype>_<M>_<N>_<K>` to a measured choice: the kernel that beat cuBLASLt on that problem (with
its runtime knobs and the measured times) and/or the cuBLASLt configuration that was fastest there ("cublaslt": algo
id, tile, stages, split-K, reduction, swizzle, custom option, inner and cluster shape). A table whose header does not
match the running GPU/toolkit is rejected with a warning and the dispatcher uses cuBLASLt's heuristic; its cuBLASLt
configurations are used only under the cuBLASLt version that measured them (its kernels still are). A user's own
tuned table (`python -m cudal2_ops.tune`, at `tuned_table_file()`) overlays the shipped one entry by entry.
"""
from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cudal2_catalog.config import Knobs

SCHEMA_VERSION = 1
LAYOUTS, DTYPES = ("nn", "nt"), ("fp16", "bf16")
# The fields of an entry's "cublaslt" configuration, in the order the extension takes them (it checks this order
# against its own, csrc/cublaslt_config.cpp, when a table is installed).
LT_CONFIG_FIELDS = ("algo_id", "tile", "stages", "split_k", "reduction", "swizzle", "custom", "inner_shape",
                    "cluster_shape")
NEAR_TIES_RUN = 4   # near-ties of an entry the dispatcher times at a problem's first eager call (LtTableChoice;
#                     only with CUDAL2_CONFIRM_NEAR_TIES=1)
# Off-grid problems split by M's alignment: cuBLASLt's heuristic choice differs in kind when M % M_ALIGNMENT != 0 (the
# dispatcher's kMAlignment, csrc/dispatch.h), so the nearest-M cuBLASLt rule is validated and enabled per class.
M_ALIGNMENT = 8
M_CLASSES = ("aligned_m", "unaligned_m")
# The header's rules.nearest_m_cublaslt: which M classes the rule serves (old headers hold true / false).
LT_RULE_SCOPES = {"off": (), "unaligned_m": ("unaligned_m",), "aligned_m": ("aligned_m",),
                  "all": ("aligned_m", "unaligned_m")}
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


@dataclass(frozen=True, order=True)
class Problem:
    """One GEMM problem as the table keys it: D[M, N] = A[M, K] @ B, B [K, N] ("nn") or [N, K] ("nt")."""

    layout: str
    dtype: str
    m: int
    n: int
    k: int

    def __post_init__(self):
        if self.layout not in LAYOUTS or self.dtype not in DTYPES:
            raise ValueError(f"problem {self}: layout must be one of {LAYOUTS} and dtype one of {DTYPES}")
        if min(self.m, self.n, self.k) < 1:
            raise ValueError(f"problem {self}: M, N and K must be >= 1")

    @property
    def key(self) -> str:
        """The problem's table key (`entry_key`)."""
        return entry_key(self.layout, self.dtype, self.m, self.n, self.k)


def m_class(m: int) -> str:
    """The off-grid class of a problem's M: "aligned_m" (M % M_ALIGNMENT == 0) or "unaligned_m"."""
    return "aligned_m" if m % M_ALIGNMENT == 0 else "unaligned_m"


def lt_rule_scope(classes: Iterable[str]) -> str:
    """The LT_RULE_SCOPES name that enables the nearest-M cuBLASLt rule for exactly `classes` (M_CLASSES names)."""
    wanted = set(classes)
    unknown = wanted - set(M_CLASSES)
    if unknown:
        raise ValueError(f"unknown M classes {sorted(unknown)}; expected some of {M_CLASSES}")
    return next(name for name, scope in LT_RULE_SCOPES.items() if set(scope) == wanted)


def header_lt_rule_scope(header: dict) -> str:
    """The header's rules.nearest_m_cublaslt as an LT_RULE_SCOPES name ("off" when absent; old headers' true / false
    read as "all" / "off"); ValueError for anything else."""
    value = header.get("rules", {}).get("nearest_m_cublaslt", "off")
    if isinstance(value, bool):
        return "all" if value else "off"
    if value not in LT_RULE_SCOPES:
        raise ValueError(f"rules.nearest_m_cublaslt is {value!r}; expected one of {list(LT_RULE_SCOPES)} "
                         f"(or true / false)")
    return value


def parse_key(key: str) -> tuple[str, str, int, int, int]:
    """Inverse of entry_key."""
    layout, dtype, m, n, k = key.split("_")
    if layout not in LAYOUTS or dtype not in DTYPES:
        raise ValueError(f"bad table key {key!r}: expected <nn|nt>_<fp16|bf16>_M_N_K")
    return layout, dtype, int(m), int(n), int(k)


@dataclass
class DeviceFacts:
    """What a table header is validated against."""

    gpu_name: str
    sm_count: int
    capability: tuple[int, int]
    cuda: str
    cublaslt: int | None = None  # cublasLtGetVersion() of the running library (None: unknown)

    @classmethod
    def of(cls, device: int) -> "DeviceFacts":
        import torch

        from cudal2_ops._extension import _C

        props = torch.cuda.get_device_properties(device)
        return cls(props.name, props.multi_processor_count, (props.major, props.minor), torch.version.cuda or "",
                   int(_C.cublaslt_version()) if _C is not None else None)


@dataclass
class Table:
    """A loaded table: header, entries and where it came from."""

    path: Path
    header: dict
    entries: dict = field(default_factory=dict)

    @property
    def nearest_m_up(self) -> bool:
        """Whether the search validated the nearest-tuned-M rule (kernel entries) for misses on this table."""
        return bool(self.header.get("rules", {}).get("nearest_m_up", False))

    @property
    def nearest_m_cublaslt(self) -> str:
        """For which M classes measurements validated the nearest-tuned-M rule for cuBLASLt configurations on misses
        (an LT_RULE_SCOPES name)."""
        return header_lt_rule_scope(self.header)


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


def table_name(facts: DeviceFacts) -> Path:
    """`<arch_dir>/<gpu_slug>.json`, a device's table path below a tables folder."""
    return Path(arch_dir(facts.capability)) / f"{gpu_slug(facts.gpu_name)}.json"


def tuned_table_file(facts: DeviceFacts) -> Path:
    """Where `python -m cudal2_ops.tune` writes a user's tuned entries for this GPU (CUDAL2_TUNED_TABLE overrides):
    `~/.cache/cudal2/tables/<arch_dir>/<gpu_slug>.json`."""
    if os.environ.get("CUDAL2_TUNED_TABLE"):
        return Path(os.environ["CUDAL2_TUNED_TABLE"])
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "cudal2" / "tables" / table_name(facts)


def find_table_file(facts: DeviceFacts) -> Path | None:
    """CUDAL2_TABLE if set, else the installed table for this GPU, else the repository's."""
    if os.environ.get("CUDAL2_TABLE"):
        return Path(os.environ["CUDAL2_TABLE"])
    name = table_name(facts)
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
    header_lt_rule_scope(data["header"])
    return Table(Path(path), data["header"], data["entries"])


def _validated(path: Path, facts: DeviceFacts) -> Table | None:
    """The table at `path` if it reads and fits this device, else None with a warning naming why."""
    try:
        table = read_table(path)
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        warnings.warn(f"cudal2_ops: ignoring table {path}: {exc}; using cuBLASLt", RuntimeWarning, stacklevel=3)
        return None
    problems = header_problems(table.header, facts)
    if problems:
        warnings.warn(f"cudal2_ops: ignoring table {path} ({'; '.join(problems)}); using cuBLASLt", RuntimeWarning,
                      stacklevel=3)
        return None
    return _without_foreign_cublaslt(table, facts)


def _without_foreign_cublaslt(table: Table, facts: DeviceFacts) -> Table:
    """`table` with its cuBLASLt configurations dropped (one warning) when another cuBLASLt version measured them."""
    recorded = table.header.get("cublaslt_version")
    has_configs = any("cublaslt" in e for e in table.entries.values())
    if not has_configs or facts.cublaslt is None or recorded == facts.cublaslt:
        return table
    warnings.warn(f"cudal2_ops: table {table.path} holds cuBLASLt configurations measured with cuBLASLt {recorded}; "
                  f"this is cuBLASLt {facts.cublaslt}, so those problems use cuBLASLt's heuristic (its kernels are "
                  f"still used). Re-tune with `python -m cudal2_ops.tune`.", RuntimeWarning, stacklevel=4)
    entries = {key: {k: v for k, v in e.items() if k not in ("cublaslt", "cublaslt_near")}
               for key, e in table.entries.items()}
    return Table(table.path, table.header, {key: e for key, e in entries.items() if "kernel" in e})


def load_table_for(facts: DeviceFacts) -> Table | None:
    """The validated table for a device, overlaid with the user's tuned table when one exists, or None (with a
    warning when a table exists but does not fit)."""
    path = find_table_file(facts)
    table = _validated(path, facts) if path is not None else None
    tuned_path = tuned_table_file(facts)
    tuned = _validated(tuned_path, facts) if tuned_path.exists() and tuned_path != path else None
    if tuned is None:
        return table
    if table is None:
        return tuned
    header = dict(table.header, tuned_overlay=str(tuned_path))
    return Table(table.path, header, {**table.entries, **tuned.entries})


def cublaslt_fields(entry: dict) -> list[int]:
    """An entry's cuBLASLt configuration as the dispatcher takes it (LT_CONFIG_FIELDS order; [] for none)."""
    config = entry.get("cublaslt")
    if not config:
        return []
    missing = [name for name in LT_CONFIG_FIELDS if name not in config]
    if missing:
        raise ValueError(f"cuBLASLt configuration {config} lacks {missing}")
    return [int(config[name]) for name in LT_CONFIG_FIELDS]


def slower_than_heuristic(entry: dict) -> bool:
    """Whether the entry's cuBLASLt configuration was measured, in the tuning that chose it, slower than cuBLASLt's
    heuristic choice (what the dispatcher runs for a problem without a configuration). Tuning re-times the heuristic's
    choice among its finalists and so cannot choose such a configuration now; tables tuned before it did (a noisy
    first pass could drop the heuristic's choice), and such a configuration is worth less than none."""
    heuristic_us = entry.get("cublaslt_heuristic_us")
    return bool(entry.get("cublaslt")) and heuristic_us is not None and entry.get("cublaslt_us", 0.0) > heuristic_us


def near_tie_fields(entry: dict) -> list[list[int]]:
    """The cuBLASLt configurations an entry's tuning measured within a few percent of its own (`cublaslt_near`,
    fastest first), as the dispatcher takes them: at most NEAR_TIES_RUN."""
    return [cublaslt_fields(tie) for tie in entry.get("cublaslt_near", [])[:NEAR_TIES_RUN]]


def table_rows(table: Table) -> list[tuple]:
    """Rows for the dispatcher: (layout, dtype, m, n, k, kernel or "", splits, swizzle, raster, cuBLASLt fields, its
    near-ties' fields). A cuBLASLt configuration `slower_than_heuristic` is left out with its near-ties (and with them
    an entry that names no kernel), so those problems run the heuristic's choice."""
    rows = []
    for key, entry in table.entries.items():
        config = [] if slower_than_heuristic(entry) else cublaslt_fields(entry)
        if not config and not entry.get("kernel"):
            continue
        layout, dtype, m, n, k = parse_key(key)
        rows.append((layout, dtype, m, n, k, entry.get("kernel", ""), *Knobs.from_dict(entry), config,
                     near_tie_fields(entry) if config else []))
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
    if tuple(_C.tuning.lt_config_fields()) != LT_CONFIG_FIELDS:
        raise RuntimeError(f"cudal2_ops: the extension's cuBLASLt configuration fields {_C.tuning.lt_config_fields()} "
                           f"differ from the tables' {LT_CONFIG_FIELDS}: rebuild the extension")
    missing = _C.set_table(device, table_rows(table), table.nearest_m_up, table.nearest_m_cublaslt)
    if missing:
        warnings.warn(f"cudal2_ops: table {table.path} names {len(missing)} kernels that are not built "
                      f"(e.g. {missing[0]}); those shapes use cuBLASLt", RuntimeWarning, stacklevel=2)
