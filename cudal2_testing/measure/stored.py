"""Files as the results folders keep them: JSON plain or gzip-compressed (`.json.gz`, the larger ones), so that the
committed results stay small enough to travel with the repository to a GPU machine."""
from __future__ import annotations

import gzip
import json
from pathlib import Path


def read_json(path: str | Path) -> dict:
    """A JSON file, plain or gzip-compressed (by its `.gz` suffix)."""
    path = Path(path)
    return json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_text())
