"""The sanitizer gate of shipped tables (search.sanitize_gate): which records count, what a withheld entry becomes."""
import json

from build_tools import kernel_lib
from search import sanitize_gate

CLEAN = {"status": "clean"}


def report(tmp_path, name, kernels):
    path = tmp_path / f"{name}_sanitize.json"
    path.write_text(json.dumps({"schema": "cudal2.sanitize/1", "kernels": kernels}))
    return path


def test_a_record_counts_when_every_tool_that_ran_is_clean(tmp_path):
    paths = [report(tmp_path, "a", {"k_clean": {"memcheck": CLEAN, "racecheck": CLEAN, "code": "c1"},
                                    "k_race": {"memcheck": CLEAN, "racecheck": {"status": "errors"}, "code": "c1"},
                                    "k_wrong": {"memcheck": {"status": "wrong"}},
                                    "k_old": {"memcheck": CLEAN}}),
             report(tmp_path, "b", {"k_clean": {"memcheck": CLEAN, "code": "c0"}})]
    records = sanitize_gate.clean_records(paths)
    assert records == {"k_clean": {"c1", "c0"}, "k_old": {None}}
    code = {"k_clean": "c1", "k_old": "anything", "k_race": "c1"}.get
    assert sanitize_gate.sanitized("k_clean", records, code)
    assert sanitize_gate.sanitized("k_old", records, code)          # a report without digests counts by name
    assert not sanitize_gate.sanitized("k_clean", records, lambda name: "c2")  # the code changed since
    assert not sanitize_gate.sanitized("k_race", records, code)
    assert not sanitize_gate.sanitized("k_none", records, code)


def test_withheld_entries_keep_their_cublaslt_configuration_or_leave():
    lt = {"algo_id": 66, "tile": 17}
    table = {"header": {"gpu_name": "H"}, "entries": {
        "nt_fp16_64_64_64": {"kernel": "k_new", "splits": 8, "swizzle": 0, "raster": 0, "kernel_us": 1.9,
                             "speedup": 1.13, "cublaslt": lt, "cublaslt_us": 2.17},
        "nt_fp16_64_64_128": {"kernel": "k_new", "kernel_us": 2.0, "baseline_us": 2.3},
        "nt_fp16_128_64_64": {"kernel": "k_ok", "cublaslt": lt},
        "nt_fp16_128_128_64": {"cublaslt": lt, "cublaslt_us": 2.2}}}
    records = {"k_ok": {None}}
    gated = sanitize_gate.withhold(table, records, code_of=lambda name: None)
    assert gated["entries"] == {"nt_fp16_64_64_64": {"cublaslt": lt, "cublaslt_us": 2.17},
                                "nt_fp16_128_64_64": {"kernel": "k_ok", "cublaslt": lt},
                                "nt_fp16_128_128_64": {"cublaslt": lt, "cublaslt_us": 2.2}}
    assert gated["header"] == {"gpu_name": "H", "withheld_unsanitized": ["k_new"]}
    assert sanitize_gate.withhold(gated, records, code_of=lambda name: None) == gated  # a second pass keeps the list
    later = {"k_ok": {None}, "k_new": {None}}                                          # ... until k_new passes
    assert "withheld_unsanitized" not in sanitize_gate.withhold(gated, later, code_of=lambda name: None)["header"]
    assert "withheld_unsanitized" not in sanitize_gate.withhold(
        {"header": {}, "entries": {"k": {"kernel": "k_ok"}}}, records, code_of=lambda name: None)["header"]


def test_each_kernel_is_judged_once_however_many_entries_name_it():
    table = {"header": {}, "entries": {f"nt_fp16_{m}_64_64": {"kernel": "k" + str(m % 2)} for m in range(1, 41)}}
    judged = []
    code_of = lambda name: judged.append(name) or "d"  # noqa: E731
    gated = sanitize_gate.withhold(table, {"k0": {"d"}, "k1": {"other"}}, code_of=code_of)
    assert sorted(judged) == ["k0", "k1"]
    assert gated["header"] == {"withheld_unsanitized": ["k1"]} and len(gated["entries"]) == 20


def test_the_code_digest_follows_the_source_and_its_headers(tmp_path, monkeypatch):
    include = tmp_path / "include"
    (include / "cudal2").mkdir(parents=True)
    header = include / "cudal2" / "h.cuh"
    header.write_text("// v1\n")
    source = tmp_path / "k.cu"
    source.write_text('#include "cudal2/h.cuh"\n')
    monkeypatch.setattr(kernel_lib, "INCLUDE_DIR", include)
    first = kernel_lib.code_digest(source)
    assert kernel_lib.code_digest(source) == first
    header.write_text("// v2\n")
    assert kernel_lib.code_digest(source) != first


def test_every_kernel_in_a_committed_table_is_sanitized():
    """The committed tables went through the gate: each kernel they name has a clean record for its current code."""
    records = sanitize_gate.committed_records()
    for path in sorted((sanitize_gate.REPO / "kernels").glob("*/*.json")):
        table = json.loads(path.read_text())
        names = {e["kernel"] for e in table["entries"].values() if e.get("kernel")}
        unsanitized = sorted(n for n in names if not sanitize_gate.sanitized(n, records, sanitize_gate.current_code))
        assert not unsanitized, f"{path.name}: {unsanitized}"


def test_a_gpu_calls_own_report_joins_the_committed_ones(tmp_path):
    """gate(table, reports): a kernel that only this call's report has run clean keeps its entries."""
    name = "kernel_no_committed_report_names"
    table = {"header": {}, "entries": {"nt_fp16_64_64_64": {"kernel": name, "cublaslt": {"algo_id": 1}}}}
    assert sanitize_gate.gate(table)["header"].get("withheld_unsanitized") == [name]
    fresh = report(tmp_path, "call", {name: {"memcheck": CLEAN, "racecheck": CLEAN}})
    assert sanitize_gate.gate(table, [fresh]) == table


def test_a_withheld_kernel_says_why():
    """The gate's report tells a kernel with no clean record from one whose code cannot be known and from one whose
    code changed since its record."""
    records = {"k_clean": {"c1"}}
    assert "no clean sanitizer record" in sanitize_gate.withheld_reason("k_none", records, lambda name: "c1")
    assert "no buildable kernel config" in sanitize_gate.withheld_reason("k_clean", records, lambda name: None)
    assert "other code" in sanitize_gate.withheld_reason("k_clean", records, lambda name: "c2")


def test_a_kernel_whose_source_is_not_generated_here_has_the_code_codegen_would_write(tmp_path, monkeypatch):
    """A checkout without a table kernel's generated source (a GPU call's, after an earlier call generated it) still
    knows its code: the digest of what codegen writes for its name equals that of the committed source, so the gate
    keeps a sanitized kernel; a name that is no kernel config has no code."""
    table = json.loads((sanitize_gate.REPO / "kernels" / "sm90" / "nvidia_h100_80gb_hbm3.json").read_text())
    name = next(e["kernel"] for e in table["entries"].values() if e.get("kernel", "").startswith("decode"))
    committed = sanitize_gate.current_code(name)
    monkeypatch.setattr(kernel_lib, "KERNELS_DIR", tmp_path)  # no generated sources here
    assert sanitize_gate.current_code(name) == committed
    assert sanitize_gate.current_code("not_a_kernel_name") is None
