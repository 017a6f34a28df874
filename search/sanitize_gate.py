"""The sanitizer gate of the shipped tables: a kernel enters a table only once compute-sanitizer has run it clean
(docs/EVALUATION.md: random, exact-integer, NaN/guard, odd shapes and the sanitizer before a table).

The records are the committed reports of `scripts/sanitize_kernels.py` (`benchmarks/results/<gpu>/*sanitize*.json`;
the kernels are sm_90 code, so a record from one Hopper GPU serves the other). A kernel is sanitized when a report
has it with memcheck clean and racecheck clean where racecheck ran; a report that names the kernel's code digest
(build_tools.kernel_lib.code_digest) counts only for that code, and an older report without digests counts by name.
A table entry whose kernel is not sanitized is withheld: it keeps its measured cuBLASLt configuration (the kernel's
fields removed), or leaves the table when it has none; the header lists the withheld kernels.

The tools that write tables (sweeps, `search emit`, `scripts/tune_grid.py`) name kernels as measured, since a searched
kernel is built and sanitized after it is emitted; a table passes the gate before it ships (a test holds every
committed table to it) and before it is benchmarked as the shipped one (`scripts/gpu_check.sh`, stage `gate`, with that
call's sanitizer report):

    python -m search.sanitize_gate kernels/sm90/nvidia_h100_80gb_hbm3.json [--reports OUT/sanitize.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable

REPO = Path(__file__).resolve().parents[1]
REPORTS_GLOB = "benchmarks/results/*/*sanitize*.json"
KERNEL_FIELDS = ("kernel", "splits", "swizzle", "raster", "kernel_us", "speedup")
TOOLS = ("memcheck", "racecheck")


def clean_records(paths: Iterable[Path]) -> dict[str, set[str | None]]:
    """{kernel: code digests it ran clean with (None: a report without digests)} over the reports at `paths`."""
    records: dict[str, set[str | None]] = {}
    for path in paths:
        for name, entry in json.loads(path.read_text()).get("kernels", {}).items():
            runs = [entry[tool] for tool in TOOLS if isinstance(entry.get(tool), dict)]
            if "memcheck" in entry and all(run.get("status") == "clean" for run in runs):
                records.setdefault(name, set()).add(entry.get("code"))
    return records


def committed_records(root: Path = REPO) -> dict[str, set[str | None]]:
    """`clean_records` of every committed sanitizer report under `root`."""
    return clean_records(sorted(root.glob(REPORTS_GLOB)))


def current_code(name: str) -> str | None:
    """The code digest of kernel `name` in this checkout: of its generated source, or, where that is not generated
    here (a GPU call's checkout loses what an earlier call generated), of the source codegen writes for that name (the
    same bytes: a kernel's name is its whole configuration); None when the name is no buildable kernel config."""
    from build_tools import kernel_lib
    from cudal2_catalog import codegen
    from cudal2_catalog.config import HgemmConfig

    try:
        return kernel_lib.code_digest(kernel_lib.find_source(name))
    except kernel_lib.KernelBuildError:
        pass
    try:
        cfg = HgemmConfig.from_name(name)
        with tempfile.TemporaryDirectory() as tmp:
            return kernel_lib.code_digest(codegen.write_kernel(cfg, Path(tmp)))
    except ValueError:
        return None


def sanitized(name: str, records: dict[str, set[str | None]], code_of: Callable[[str], str | None]) -> bool:
    """Whether kernel `name` has a clean record for its current code (or a digest-less record by name)."""
    digests = records.get(name, set())
    return None in digests or (bool(digests) and code_of(name) in digests)


def withheld_reason(name: str, records: dict[str, set[str | None]],
                    code_of: Callable[[str], str | None] = current_code) -> str:
    """Why kernel `name` is not sanitized: no report has it clean, its name is no kernel config (its code cannot be
    known), or the clean records are for other code than this checkout's."""
    digests = records.get(name, set())
    if not digests:
        return "no clean sanitizer record"
    if code_of(name) is None:
        return "its name is no buildable kernel config, so its code cannot be checked against its records"
    return "clean records are for other code than this checkout's (source or headers changed since)"


def withhold(table: dict, records: dict[str, set[str | None]],
             code_of: Callable[[str], str | None] = current_code) -> dict:
    """`table` with every entry whose kernel is not sanitized withheld (see the module docstring); the header's
    `withheld_unsanitized` lists those kernels, with those an earlier pass withheld that are still not sanitized (absent
    when none)."""
    verdicts: dict[str, bool] = {}

    def clean(name: str) -> bool:  # judged once per kernel (a table names each kernel in many entries)
        if name not in verdicts:
            verdicts[name] = sanitized(name, records, code_of)
        return verdicts[name]

    entries = {}
    withheld = {name for name in table["header"].get("withheld_unsanitized", [])  # an earlier pass's, still unsanitized
                if not clean(name)}
    for key, entry in table["entries"].items():
        name = entry.get("kernel")
        if name and not clean(name):
            withheld.add(name)
            entry = {field: value for field, value in entry.items() if field not in KERNEL_FIELDS}
            if not entry.get("cublaslt"):
                continue
        entries[key] = entry
    header = {k: v for k, v in table["header"].items() if k != "withheld_unsanitized"}
    if withheld:
        header["withheld_unsanitized"] = sorted(withheld)
    return {**table, "header": header, "entries": entries}


def all_records(reports: Iterable[Path] = ()) -> dict[str, set[str | None]]:
    """`clean_records` of the committed sanitizer reports joined with those of further `reports` (a GPU call's own)."""
    records = committed_records()
    for name, digests in clean_records(reports).items():
        records.setdefault(name, set()).update(digests)
    return records


def gate(table: dict, reports: Iterable[Path] = ()) -> dict:
    """`withhold` against the committed sanitizer reports and any further `reports` (a GPU call's own)."""
    return withhold(table, all_records(reports))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m search.sanitize_gate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tables", type=Path, nargs="+", help="table files to rewrite through the gate")
    parser.add_argument("--reports", type=Path, nargs="*", default=[],
                        help="sanitizer reports beside the committed ones (scripts/sanitize_kernels.py --out)")
    args = parser.parse_args(argv)
    records = all_records(args.reports)
    for path in args.tables:
        table = json.loads(path.read_text())
        gated = withhold(table, records)
        kernels = sum(bool(e.get("kernel")) for e in gated["entries"].values())
        withheld = gated["header"].get("withheld_unsanitized", [])
        print(f"{path}: {kernels} kernel entries kept, "
              f"{sum(bool(e.get('kernel')) for e in table['entries'].values()) - kernels} withheld "
              f"({', '.join(withheld) or 'none'})")
        for name in withheld:
            print(f"  {name}: {withheld_reason(name, records)}")
        path.write_text(json.dumps(gated, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
