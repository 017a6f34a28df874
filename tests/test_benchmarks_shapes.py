"""CPU tests of the benchmark shape sets and the stratified sampling."""
from collections import Counter

import pytest

from cudal2_testing.measure import shapes


def test_g1000_is_the_full_grid():
    grid = shapes.g1000()
    assert len(grid) == len(set(grid)) == 1000
    assert (64, 64, 64) in grid and (16384, 16384, 16384) in grid


def test_buckets_cover_the_report_edges():
    assert shapes.bucket_of((64, 64, 64)) == "<24"          # 2^18
    assert shapes.bucket_of((256, 256, 256)) == "24-28"     # 2^24 is the first value of 24-28
    assert shapes.bucket_of((1024, 1024, 1024)) == "28-32"  # 2^30
    assert shapes.bucket_of((2048, 2048, 1024)) == "32-36"  # 2^32
    assert shapes.bucket_of((16384, 16384, 16384)) == "40-43"


def test_stratified_sample_is_reproducible_and_balanced():
    grid = shapes.g1000()
    a = shapes.stratified_sample(grid, 120, seed=3)
    assert a == shapes.stratified_sample(grid, 120, seed=3)
    assert a != shapes.stratified_sample(grid, 120, seed=4)
    assert len(a) == len(set(a)) == 120
    assert set(Counter(map(shapes.bucket_of, a)).values()) == {20}


def test_stratified_sample_redistributes_small_buckets():
    grid = shapes.g1000()
    counts = Counter(map(shapes.bucket_of, grid))
    smallest = min(counts.values())  # the 40-43 bucket has 26 shapes
    sample = shapes.stratified_sample(grid, 6 * smallest + 60, seed=0)
    got = Counter(map(shapes.bucket_of, sample))
    assert len(sample) == 6 * smallest + 60
    assert got["40-43"] == counts["40-43"]
    assert max(got.values()) - min(v for b, v in got.items() if b != "40-43") <= 1


def test_sample_larger_than_set_returns_everything():
    assert shapes.stratified_sample(shapes.g1000(), 5000, seed=0) == shapes.g1000()


def test_llm_shapes_include_decode_and_prefill():
    llm = shapes.llm()
    assert len(llm) == len(set(llm))
    ms = {m for m, _, _ in llm}
    assert 1 in ms and 8192 in ms
    assert (1, 14336, 4096) in llm and (4096, 4096, 14336) in llm


def test_odd_shapes_are_seeded():
    assert shapes.odd(1) == shapes.odd(1) != shapes.odd(2)
    assert len(shapes.odd(1)) == shapes.ODD_COUNT


def test_load_and_labels():
    assert len(shapes.load("g1000", 100, 0)) == 100
    assert shapes.set_label("g1000", 100) == "g1000-sample100"
    assert shapes.set_label("llm", None) == "llm"
    with pytest.raises(ValueError):
        shapes.load("nope")
