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
