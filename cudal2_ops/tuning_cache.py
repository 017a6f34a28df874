"""The cuBLASLt tuning file: algorithms found with CUDAL2_TUNE=1, reused by later processes.

Keyed like PyTorch TunableOp's results: validator lines (GPU, driver, CUDA, cuBLASLt version) and one row per
problem. A file whose validators do not match this machine is ignored with a warning. The default location is
`~/.cache/cudal2/cublaslt_tuning.json` (CUDAL2_TUNE_FILE overrides it).
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

FORMAT_VERSION = 1


def tuning_file() -> Path:
    """Where tuned algorithms are stored."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cudal2" / "cublaslt_tuning.json"
    return Path(os.environ.get("CUDAL2_TUNE_FILE", default))


def current_validators() -> dict:
    """The facts a tuning file must match: GPU of device 0, driver, CUDA runtime, cuBLASLt version."""
    import torch

    from cudal2_ops._extension import _C

    return {
        "format": FORMAT_VERSION,
        "gpu_name": torch.cuda.get_device_name(0),
        "driver": torch._C._cuda_getDriverVersion() if hasattr(torch._C, "_cuda_getDriverVersion") else None,
        "cuda": torch.version.cuda,
        "cublaslt": _C.cublaslt_version() if _C is not None else None,
    }


def read_entries(path: Path, validators: dict) -> dict[str, dict]:
    """Entries of a tuning file whose validators equal `validators` ({} if missing or mismatching)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        warnings.warn(f"cudal2_ops: ignoring unreadable tuning file {path}: {exc}", RuntimeWarning, stacklevel=2)
        return {}
    if data.get("validators") != validators:
        warnings.warn(f"cudal2_ops: ignoring tuning file {path}: recorded for {data.get('validators')}, this machine "
                      f"is {validators}", RuntimeWarning, stacklevel=2)
        return {}
    return dict(data.get("entries", {}))


def write_entries(path: Path, validators: dict, entries: dict[str, dict]) -> None:
    """Writes the tuning file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"validators": validators, "entries": entries}, indent=1, sort_keys=True))
    tmp.replace(path)


def load_into_dispatcher() -> int:
    """Hands the algorithms of a matching tuning file to the dispatcher; returns how many."""
    from cudal2_ops._extension import _C

    entries = read_entries(tuning_file(), current_validators())
    for key, entry in entries.items():
        _C.add_known_algo(key, entry["algo"])
    return len(entries)


def save_from_dispatcher() -> int:
    """Merges this process's tuned algorithms into the tuning file; returns how many are new or updated."""
    from cudal2_ops._extension import _C

    records = _C.tuned_records()
    if not records:
        return 0
    validators = current_validators()
    path = tuning_file()
    entries = read_entries(path, validators)
    for key, algo_hex, us in records:
        entries[key] = {"algo": algo_hex, "us": round(float(us), 3)}
    write_entries(path, validators, entries)
    return len(records)
