"""The search space as data: schema, points <-> candidates, feasibility, sampling and mutations."""
import json
import random

import pytest

from cudal2_catalog import space as catalog_space
from cudal2_catalog.codegen import default_configs
from cudal2_catalog.config import HgemmConfig, Knobs
from search import candidate_space as space
from search.candidate import Candidate, Problem

NT = Problem("nt", "fp16", 4096, 4096, 4096)


def test_schema_is_json_with_choices_and_meanings_for_every_family():
    doc = json.loads(json.dumps(catalog_space.schema()))
    assert set(doc["families"]) == {"sm90_tma_ws", "sm80_cute", "decode", "tiny"}
    for fam in doc["families"].values():
        for entry in list(fam["fields"].values()) + list(fam["knobs"].values()):
            assert entry["choices"] and entry["meaning"]
    assert list(catalog_space.schema("decode")["families"]) == ["decode"]


def test_every_default_kernel_round_trips_through_its_point():
    for cfg in default_configs():
        cand = Candidate(config=cfg.name, knobs=(0, 0, 0))
        point = json.loads(json.dumps(space.point_of(cand)))
        assert space.parse_point(point, "test") == Candidate(config=cfg.name, provenance="test")


@pytest.mark.parametrize("change, message", [
    ({"warp_size": 32}, "unknown field"),
    ({"tile_m": 100}, "tile_m=100"),
    ({"swizzle": 3}, "knob swizzle=3"),
    ({"family": "sm70"}, "unknown family"),
])
def test_points_outside_the_space_are_rejected_with_the_field(change, message):
    point = space.point_of(Candidate(config=default_configs()[0].name))
    with pytest.raises(ValueError, match=message):
        space.parse_point({**point, **change}, "llm")


def test_catalog_points_are_configs_with_knobs():
    cfg = default_configs()[0]
    point = catalog_space.point_of(cfg, Knobs(splits=2))
    assert point["splits"] == 2 and catalog_space.parse_point(point) == (cfg, Knobs(2, 0, 0))
    assert catalog_space.sample(random.Random(3), "fp16", "nt", 90) == \
        (HgemmConfig.from_name(space.sample(random.Random(3), NT, 90).config), space.sample(random.Random(3), NT, 90).knobs)


def test_source_candidates_are_not_points():
    source = Candidate(source="...", source_name="k")
    with pytest.raises(ValueError, match="source candidate"):
        space.point_of(source)
    with pytest.raises(ValueError, match="source candidate"):
        space.neighbours(source, random.Random(0))
    assert space.check(source, NT, 90) == (True, "")


def test_missing_tile_is_rejected():
    with pytest.raises(ValueError, match="tile_n"):
        space.parse_point({"family": "decode", "dtype": "fp16", "layout": "nt", "tile_m": 16, "tile_k": 64}, "llm")


def test_check_matches_the_problem_and_the_family_feasibility():
    cfg = HgemmConfig("sm90_tma_ws", "fp16", "nn", 128, 256, 64, cluster_m=2, schedule="coop",
                      scheduler="persistent")
    ok, why = space.check(Candidate(config=cfg.name), NT, 90)
    assert not ok and "nn" in why
    big = HgemmConfig("sm90_tma_ws", "fp16", "nt", 256, 256, 128, schedule="coop", scheduler="persistent")
    ok, why = space.check(Candidate(config=big.name), NT, 90)
    assert not ok and "accumulators" in why
    good = Candidate(config=HgemmConfig("sm90_tma_ws", "fp16", "nt", 128, 256, 64, cluster_m=2, schedule="coop",
                                        scheduler="persistent").name)
    assert space.check(good, NT, 90) == (True, "")
    assert not space.check(good, NT, 80)[0]


def test_a_kernel_that_declines_the_problem_size_is_neither_checked_in_nor_sampled():
    """decode kernels run M <= tile_m only (their can_implement): the check names that, and random samples for a
    problem above every decode tile never draw one, while a decode-sized problem still gets decode candidates."""
    decode = Candidate(config=HgemmConfig("decode", "fp16", "nt", 64, 128, 128, stages=3, warps=8).name)
    ok, why = space.check(decode, NT, 90)
    assert not ok and "tile_m (64)" in why and "M=4096" in why
    assert space.check(decode, Problem("nt", "fp16", 64, 4096, 4096), 90) == (True, "")
    assert not space.check(decode, Problem("nt", "fp16", 64, 4096, 4100), 90)[0]  # K not a multiple of 8
    assert not any(space.sample(random.Random(s), NT, 90).config.startswith("decode") for s in range(200))
    small = Problem("nt", "fp16", 8, 4096, 4096)
    assert any(space.sample(random.Random(s), small, 90).config.startswith("decode") for s in range(200))


def test_samples_are_feasible_seeded_and_varied():
    draws = [space.sample(random.Random(s), NT, 90) for s in range(30)]
    assert all(space.check(c, NT, 90)[0] for c in draws)
    assert draws[:5] == [space.sample(random.Random(s), NT, 90) for s in range(5)]
    assert len({c.config.split("_fp16")[0] for c in draws}) >= 2 and len({c.id for c in draws}) > 20


def test_neighbours_move_exactly_one_choice():
    cand = Candidate(config=default_configs()[0].name, provenance="policy")
    base = space.point_of(cand)
    moved = space.neighbours(cand, random.Random(0))
    assert moved and all(c.provenance == "policy" for c in moved)
    for c in moved:
        point = space.point_of(c)
        assert sum(point[f] != base[f] for f in point) == 1


CODE_POINT = {"family": "sm80_cute", "dtype": "fp16", "layout": "nt", "tile_m": 64, "tile_n": 64, "tile_k": 64,
              "stages": 4, "warps": 4, "reg_pipeline": 1, "smem_prefetch": 2, "stagger_ab": True, "epilogue": "nosmem"}


def test_schema_describes_the_code_level_fields():
    fields = catalog_space.schema("sm80_cute")["families"]["sm80_cute"]["fields"]
    assert fields["reg_pipeline"]["choices"] == [1, 2, 3] and "register" in fields["reg_pipeline"]["meaning"]
    assert 0 in fields["smem_prefetch"]["choices"] and "stages-1" in fields["smem_prefetch"]["meaning"]
    assert fields["stagger_ab"]["choices"] == [False, True]
    assert "nosmem" in fields["epilogue"]["choices"] and "sm80_cute" in fields["epilogue"]["meaning"]
    tiny = catalog_space.schema("tiny")["families"]["tiny"]["fields"]
    assert tiny["reg_pipeline"]["choices"] == [2] and tiny["stagger_ab"]["choices"] == [False]


def test_a_point_with_code_level_fields_is_a_feasible_candidate():
    cand = space.parse_point(CODE_POINT, "llm:m")
    assert cand.config == "sm80_cute_fp16_nt_64x64x64_s4_w4_nosmem_r1_p2_stagger"
    assert space.check(cand, NT, 90) == (True, "")
    point = space.point_of(cand)
    assert all(point[field] == value for field, value in CODE_POINT.items())


@pytest.mark.parametrize("change, message", [
    ({"reg_pipeline": 3, "tile_k": 32}, "reg_pipeline 3 needs as many k-blocks per tile; tile_k 32 has 2"),
    ({"reg_pipeline": 3, "tile_m": 128, "tile_n": 128}, "registers per thread"),
    ({"smem_prefetch": 3}, "smem_prefetch 3 must be 1..stages-2 = 2"),
])
def test_infeasible_code_level_points_are_refused_with_the_reason(change, message):
    cand = space.parse_point({**CODE_POINT, **change}, "llm:m")
    ok, why = space.check(cand, NT, 90)
    assert not ok and message in why


@pytest.mark.parametrize("change, message", [
    ({"reg_pipeline": 5}, "reg_pipeline=5 is not one of"),
    ({"stagger_ab": 1}, "stagger_ab=1 is not one of"),
    ({"family": "tiny", "tile_m": 32, "tile_n": 32, "epilogue": ""}, "tiny: reg_pipeline=1 is not one of \\[2\\]"),
])
def test_code_level_values_outside_the_space_are_rejected(change, message):
    with pytest.raises(ValueError, match=message):
        space.parse_point({**CODE_POINT, **change}, "llm:m")


def test_neighbours_step_through_the_code_level_fields():
    cand = Candidate(config=HgemmConfig("sm80_cute", "fp16", "nt", 64, 64, 64, stages=4, warps=4).name)
    moved = {c.config for c in space.neighbours(cand, random.Random(0))}
    assert {cand.config + suffix for suffix in ("_r1", "_r3", "_p1", "_stagger", "_nosmem")} <= moved
