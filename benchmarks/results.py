"""Results files: `{"schema", "header", "protocol", "rows"}` JSON, written atomically so that a run can be
flushed often and resumed (rows already present are skipped)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from cudal2_testing.measure.stored import read_json

SCHEMA = 1
KEY_FIELDS = ("m", "n", "k", "dtype", "impl", "layout", "mode")
# What must be the same for rows measured in two sessions to sit in one results file: the GPU and software, the code,
# the dispatcher's settings and the table it loaded (a run resumed without the table it started with is two runs).
RESUME_IDENTITY = ("gpu", "sm_count", "cuda", "torch", "cublas", "cutlass", "commit", "pdl_disabled",
                   "cudal2_environment", "table")


def row_key(row: dict) -> tuple:
    """The identity of a row: shape, dtype, implementation, its B layout and the timing mode."""
    return tuple(row[f] for f in KEY_FIELDS)


def load(path: Path) -> dict:
    """A results document, plain or gzip-compressed (`.json.gz`, as the results folders keep them)."""
    doc = read_json(path)
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: results schema {doc.get('schema')!r}, expected {SCHEMA}")
    return doc


def save(path: Path, doc: dict) -> None:
    """Writes `doc` atomically (temporary file + rename), one row per line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    head = {k: v for k, v in doc.items() if k != "rows"}
    text = json.dumps(head, indent=1)[:-2] + ',\n "rows": [\n' + ",\n".join(json.dumps(r) for r in doc["rows"])
    tmp.write_text(text + "\n ]\n}\n")
    os.replace(tmp, path)


def resume_conflicts(recorded: dict, current: dict) -> list[str]:
    """How the header of a results file and this session's differ in what RESUME_IDENTITY says must match (empty when
    the file may be continued)."""
    return [f"{field}: {recorded.get(field)!r} in the file, {current.get(field)!r} now" for field in RESUME_IDENTITY
            if recorded.get(field) != current.get(field)]


def table_request_unmet(header: dict, requested: str | None) -> str | None:
    """Why the header's dispatcher table is not the one CUDAL2_TABLE (`requested`) asked for, or None when it is (or
    none was asked for): a run told to measure a table must not measure cuBLASLt's heuristic instead."""
    if not requested:
        return None
    table = header.get("table")
    if table is None:
        return f"CUDAL2_TABLE={requested} but the dispatcher loaded no table (missing, unreadable or for another GPU)"
    if Path(table["path"]).resolve() != Path(requested).resolve():
        return f"CUDAL2_TABLE={requested} but the dispatcher loaded {table['path']}"
    return None


def new_document(header: dict, protocol: dict) -> dict:
    """An empty results document."""
    return {"schema": SCHEMA, "header": header, "protocol": protocol, "rows": []}
