"""Where each committed per-GPU table comes from, and its rebuild from those committed results: the sweeps through
`search.table_select`, then the search store through `search emit` (merged over the swept table), then the
`scripts/tune_grid.py` results in the order they were merged (a later run's entry replaces an earlier one), then the
sanitizer gate against the committed sanitizer reports. No entry is hand-edited: a test holds every committed table
equal to its rebuild, and after a new sanitizer report (or a new tuning listed here) the rebuild is how a table
changes:

    python -m search.table_sources nvidia_h100_80gb_hbm3 nvidia_h200     # rewrites kernels/sm90/<slug>.json
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from cudal2_testing.measure.stored import read_json
from search import emit, sanitize_gate, table_select
from search.store import read_store

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


class Sources(NamedTuple):
    """A table's committed results, under benchmarks/results/<slug>/: sweeps (later ones win per problem), a search
    store (gzip SQLite) or None, tunings in merge order."""

    sweeps: tuple[str, ...]
    store: str | None
    tunings: tuple[str, ...]


SOURCES = {
    "nvidia_h200": Sources(
        sweeps=("sweep_2026-11-23_cc51879.json.gz", "sweep_small_m_2026-11-23_be3d17d.json.gz",
                "sweep_small_m_cold_2026-11-23_15a943c.json.gz"),
        store="search_store_2026-11-25_4a7bcf5.sqlite.gz",
        tunings=("tune_grid_below2e30_2026-11-26_87757c0.json.gz", "tune_grid_above2e30_fp16_2026-11-26_bcae5f1.json.gz",
                 "tune_grid_above2e30_bf16_2026-11-26_bcae5f1.json.gz", "tune_grid_llm_missing_2026-11-26_dd9a261.json.gz",
                 "tune_grid_below2e30_allsweeps_2026-11-26_dd9a261.json.gz",
                 *(f"tune_grid_knobs_above2e36_{dtype}_{layout}_2026-11-26_3df0b9e.json.gz"
                   for dtype in ("fp16", "bf16") for layout in ("nt", "nn")),
                 # the problems below 2^32 where the searches search_table_2026-11-26_8e4d5a6_*.sqlite.gz found a
                 # kernel under the bar, re-tuned with those finds (scripts/tune_grid.py --sweep-problems-only)
                 "tune_grid_searched_below2e32_2026-11-26_8e4d5a6.json.gz",
                 # the same after the searches resumed (search_table_2026-11-27_09f3270_*.sqlite.gz: 275-338 problems)
                 "tune_grid_searched_below2e32_2026-11-27_09f3270.json.gz",
                 # and after the next resume (search_table_2026-11-27_af4df5c_*.sqlite.gz: 435-498 problems)
                 "tune_grid_searched_below2e32_2026-11-27_af4df5c.json.gz",
                 # and after the last resume below 2^32 (search_table_2026-11-27_3493618_*.sqlite.gz: 643-690 problems)
                 "tune_grid_searched_below2e32_2026-11-27_3493618.json.gz",
                 # and after the search measured all 696 (search_table_2026-11-27_2d24511_*.sqlite.gz)
                 "tune_grid_searched_below2e32_2026-11-27_2d24511.json.gz")),
    "nvidia_h100_80gb_hbm3": Sources(
        sweeps=("sweep_2026-11-25_a3fd6a0.json.gz",),
        store=None,
        tunings=("tune_grid_g1000_fp16_2026-11-25.json.gz", "tune_grid_g1000_bf16_2026-11-25.json.gz",
                 "tune_grid_llm_2026-11-25.json.gz", "tune_grid_all_2026-11-25_retuned.json.gz",
                 "tune_grid_below2e30_2026-11-25_b1c4805.json.gz",
                 *(f"tune_grid_{part}_2026-11-26_730621b.json.gz" for part in ("g1000_fp16", "g1000_bf16", "llm")),
                 "tune_grid_llm_candidates_2026-11-26_6c1e706.json.gz",
                 "tune_grid_below2e28_tinycand_2026-11-26_137420a.json.gz",
                 # the problems where the searches search_table_2026-11-27_55b702d_*.sqlite.gz (the smallest 64-80 of
                 # 696 problems below 2^32) found a kernel under the bar, re-tuned with those finds
                 "tune_grid_searched_below2e32_2026-11-27_55b702d.json.gz",
                 # and after the searches resumed with the H200's wins first (search_table_2026-11-27_ee0a6cb_*.sqlite.gz:
                 # 176-416 problems)
                 "tune_grid_searched_below2e32_2026-11-27_ee0a6cb.json.gz",
                 # the 65 entries the bar beat with another cuBLASLt configuration in ee0a6cb's benchmarks
                 # (table_drift_searched_2026-11-27_ee0a6cb_losses.txt), re-tuned alone (--problems-from)
                 "tune_grid_losses_2026-11-27_7984c9b.json.gz",
                 # the fp16 NN and bf16 NN searches after they measured all 696 and 544 problems
                 # (search_table_2026-11-27_03523db_fp16_nn / 7984c9b_bf16_nn), re-tuned with their finds, one lane each
                 *(f"tune_grid_searched_below2e32_2026-11-27_7984c9b_{case}.json.gz" for case in ("fp16_nn", "bf16_nn")))),
}


class Rebuild(NamedTuple):
    """Each stage's table of a rebuild (`emitted` None without a store; `tuned` the input of the gate) and its result."""

    swept: dict
    emitted: dict | None
    tunings: list[dict]
    tuned: dict
    table: dict


def rebuild(slug: str, committed_header: dict, results: Path = RESULTS) -> Rebuild:
    """The table of GPU `slug` rebuilt from its Sources. The tunings' table keeps `committed_header` (a tuning's
    results file holds its entries and environment, the table header the tuner wrote is the committed one), less the
    gate's own `withheld_unsanitized`, which the gate derives again."""
    sources, folder = SOURCES[slug], results / slug
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if table_select.main([*(str(folder / name) for name in sources.sweeps), "--root", str(root)]) != 0:
            raise RuntimeError(f"{slug}: table_select failed on {sources.sweeps}")
        path = root / "sm90" / f"{slug}.json"
        swept = json.loads(path.read_text())
        emitted = None
        if sources.store:
            with read_store(folder / sources.store) as store:
                emit.emit(store, root)
            emitted = json.loads(path.read_text())
        built = emitted or swept
    tunings = [read_json(folder / name) for name in sources.tunings]
    header = {k: v for k, v in committed_header.items() if k != "withheld_unsanitized"}
    entries = dict(built["entries"])
    for tuning in tunings:
        entries.update(tuning["entries"])
    tuned = {"header": header if tunings else built["header"], "entries": entries}
    return Rebuild(swept, emitted, tunings, tuned, sanitize_gate.gate(tuned))


def table_file(slug: str) -> Path:
    """The committed table of GPU `slug`."""
    return REPO / "kernels" / "sm90" / f"{slug}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m search.table_sources", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("slugs", nargs="*", default=sorted(SOURCES), help=f"GPUs to rebuild (default: {sorted(SOURCES)})")
    args = parser.parse_args(argv)
    for slug in args.slugs:
        if slug not in SOURCES:
            print(f"no sources recorded for {slug!r}; known: {sorted(SOURCES)}", file=sys.stderr)
            return 2
        path = table_file(slug)
        table = rebuild(slug, json.loads(path.read_text())["header"]).table
        path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        kernels = sum("kernel" in e for e in table["entries"].values())
        print(f"{path}: {len(table['entries'])} entries, {kernels} naming a kernel, withheld "
              f"{table['header'].get('withheld_unsanitized', 'none')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
