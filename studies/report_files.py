"""How a study writes its report: the Markdown at `--out`, its JSON document beside it, the Markdown on stdout."""
from __future__ import annotations

import json
from pathlib import Path


def write_report(out: Path, lines: list[str], doc: dict) -> None:
    """Writes `lines` to `out`, `doc` to `out` with the suffix .json, and prints the lines."""
    out.write_text("\n".join(lines))
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    print("\n".join(lines))
