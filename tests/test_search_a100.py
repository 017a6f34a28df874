"""`python -m search` on an A100 needs nothing but the GPU, proven on the CPU with the simulated backend: a run for
sm80 proposes and evaluates only kernels of the sm80 families, and `emit` writes an sm80 table that the runtime
loader accepts for an A100, with the generated source of every kernel it names."""
import json

import pytest

from cudal2_ops import tables
from search import __main__ as cli
from search.candidate import COMPILE_ERROR, OK, Candidate, Problem
from cudal2_catalog.codegen import default_configs, feasible, render
from cudal2_catalog.config import HgemmConfig
from search.simulate import SimulatedBackend
from search.store import Store
from search.table_select import table_path

SM80_FAMILIES = {"sm80_cute", "decode", "tiny"}
A100 = tables.DeviceFacts("Simulated A100-SXM4-80GB", 108, (8, 0), "simulated")
EVALS = 200


def run_sm80(db, policy: str) -> Store:
    """A simulated A100 run of 20 G1000 shapes, through the CLI."""
    assert cli.main(["run", "--arch", "sm80", "--backend", "sim", "--shapes", "sample20", "--budget-evals",
                     str(EVALS), "--store", str(db), "--policy", policy, "--quiet"]) == 0
    return Store(db)


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """(kernels root, table path) of an sm80 run emitted with `python -m search emit --root`."""
    tmp = tmp_path_factory.mktemp("a100")
    run_sm80(tmp / "s.db", "sweep")
    root = tmp / "kernels"
    assert cli.main(["emit", "--store", str(tmp / "s.db"), "--root", str(root)]) == 0
    return root, table_path(root, SimulatedBackend(arch=80).environment())


def test_the_simulated_a100():
    backend = SimulatedBackend(arch=80)
    env = backend.environment()
    assert (env["gpu_name"], env["arch"], env["capability"], env["sm_count"]) == (A100.gpu_name, 80, [8, 0], 108)
    assert backend.prebuilt() == {cfg.name for cfg in default_configs() if feasible(cfg, 80)[0]}
    assert {HgemmConfig.from_name(name).family for name in backend.prebuilt()} == SM80_FAMILIES
    assert SimulatedBackend().environment()["gpu_name"] == "Simulated H100 SXM"
    with pytest.raises(ValueError, match="sm90 and sm80"):
        SimulatedBackend(arch=75)


def test_a_kernel_that_does_not_build_for_sm80_is_a_compile_error_not_a_time():
    sm90 = next(cfg for cfg in default_configs() if cfg.family == "sm90_tma_ws" and cfg.layout == "nt")
    big_decode = next(cfg for cfg in default_configs() if cfg.family == "decode" and not feasible(cfg, 80)[0])
    source = Candidate(source='#include "cudal2/sm90_gemm.cuh"\nCUDAL2_EXPORT_KERNEL(k)\n', source_name="k")
    cands = [Candidate(config=sm90.name), Candidate(config=big_decode.name), source]
    backend = SimulatedBackend(arch=80)
    outcomes = backend.compile(cands)
    assert not any(outcome.ok for outcome in outcomes.values())
    assert "compute capability 90 only" in outcomes[sm90.name].log
    results = backend.evaluate([(cand, Problem("nt", "fp16", 64, 4096, 4096)) for cand in cands])
    assert [r.status for r in results] == [COMPILE_ERROR] * 3 and all(r.us is None for r in results)
    assert "does not build for sm80" in results[1].reason


@pytest.mark.parametrize("policy", ["sweep", "random", "rl"])
def test_an_sm80_run_proposes_and_evaluates_only_sm80_kernels(tmp_path, policy):
    store = run_sm80(tmp_path / "s.db", policy)
    env = json.loads(store.runs()[0]["environment"])
    assert (env["gpu_name"], env["arch"]) == (A100.gpu_name, 80)
    proposed = {row["candidate_id"] for row in store.proposals() if row["candidate_id"]}
    evaluations = store.evaluations()
    assert len(evaluations) == EVALS and sum(row["status"] == OK for row in evaluations) > EVALS // 2
    for cand in map(store.candidate, proposed | {row["candidate_id"] for row in evaluations}):
        cfg = HgemmConfig.from_name(cand.config)
        assert cfg.family in SM80_FAMILIES and feasible(cfg, 80)[0], cand.id


def test_emit_writes_the_a100_table_and_its_sm80_sources(emitted):
    root, path = emitted
    assert path == root / "sm80" / "simulated_a100_sxm4_80gb.json" and path.exists()
    assert [p.name for p in root.iterdir()] == ["sm80"]
    kernels = {entry["kernel"] for entry in json.loads(path.read_text())["entries"].values()}
    assert kernels
    for name in kernels:
        cfg = HgemmConfig.from_name(name)
        assert cfg.family in SM80_FAMILIES and cfg.arch_dir == "sm80" and feasible(cfg, 80)[0]
        assert (root / "sm80" / f"{name}.cu").read_text() == render(cfg)


def test_the_a100_table_passes_the_loader_validators(emitted, monkeypatch):
    _, path = emitted
    monkeypatch.setenv("CUDAL2_TABLE", str(path))
    table = tables.load_table_for(A100)
    assert table is not None and table.header["capability"] == [8, 0]
    rows = tables.table_rows(table)
    assert len(rows) == len(table.entries) > 0
    assert {HgemmConfig.from_name(row[5]).family for row in rows} <= SM80_FAMILIES
    with pytest.warns(RuntimeWarning, match="sm_count 108 != 132"):
        assert tables.load_table_for(tables.DeviceFacts(A100.gpu_name, 132, (9, 0), "simulated")) is None
