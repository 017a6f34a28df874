"""Every family's declared search space (SPACE, KNOB_SPACE) agrees with its feasibility rules and knob grids."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudal2_catalog.config import DEFAULT_KNOBS, EPILOGUES, FAMILIES, FAMILY_FIELDS, SPLITK_POLICIES, HgemmConfig, Knobs
from cudal2_catalog.families import family_module, knob_grid

CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(HgemmConfig) if f.name != "family")
ARCHS = (80, 90)


def feasible_anywhere(fam, cfg: HgemmConfig) -> bool:
    return any(fam.feasible(cfg, arch)[0] for arch in ARCHS)


def outside_values(field: str, space: tuple) -> list:
    """Values HgemmConfig accepts for `field` that the family's space does not hold."""
    if field in ("epilogue", "splitk"):
        return [v for v in (EPILOGUES if field == "epilogue" else SPLITK_POLICIES) if v not in space]
    sample = space[0]
    if isinstance(sample, bool):
        return [v for v in (False, True) if v not in space]
    if isinstance(sample, int):
        return [v for v in (1, max(space) + 1, 2 * max(space)) if v not in space]
    return [v for v in ("bogus",) if v not in space]


def own_fields(family: str) -> set[str]:
    """The config fields a family's SPACE names: all but the code-level fields of other families' templates."""
    return {f for f in CONFIG_FIELDS if FAMILY_FIELDS.get(f, family) == family}


@pytest.mark.parametrize("family", FAMILIES)
def test_space_names_every_config_field(family: str) -> None:
    fam = family_module(family)
    assert set(fam.SPACE) == own_fields(family)
    assert all(isinstance(values, tuple) and values for values in fam.SPACE.values())
    assert set(fam.KNOB_SPACE) == set(Knobs._fields)
    assert all(0 in values for values in fam.KNOB_SPACE.values()), "0 (the kernel's default) is always a knob value"


@pytest.mark.parametrize("family, field", [(family, field) for field, owner in sorted(FAMILY_FIELDS.items())
                                           for family in FAMILIES if family != owner])
def test_other_families_refuse_a_code_level_field(family: str, field: str) -> None:
    base = family_module(family).default_configs()[0]
    value = {"stagger_ab": True, "weight_stream": "tma"}.get(field, 3)
    with pytest.raises(ValueError, match=f"{field} is a {FAMILY_FIELDS[field]} field"):
        dataclasses.replace(base, **{field: value})


@pytest.mark.parametrize("family", FAMILIES)
def test_defaults_lie_in_the_space(family: str) -> None:
    fam = family_module(family)
    for cfg in fam.default_configs():
        for field, values in fam.SPACE.items():
            assert getattr(cfg, field) in values, (cfg.name, field)


@pytest.mark.parametrize("family", FAMILIES)
def test_values_outside_the_space_are_rejected_with_a_reason(family: str) -> None:
    fam = family_module(family)
    base = fam.default_configs()[0]
    for field, values in fam.SPACE.items():
        if field in ("dtype", "layout"):
            continue  # HgemmConfig itself refuses unknown dtypes and layouts
        for value in outside_values(field, values):
            try:
                cfg = dataclasses.replace(base, **{field: value})
            except ValueError as exc:  # HgemmConfig refuses it itself (e.g. an unknown name token)
                assert field in str(exc)
                continue
            for arch in ARCHS:
                ok, reason = fam.feasible(cfg, arch)
                assert not ok and reason, (cfg.name, arch)


@pytest.mark.parametrize("family", FAMILIES)
def test_knob_grids_lie_in_the_knob_space(family: str) -> None:
    fam = family_module(family)
    for cfg in fam.default_configs():
        for m, n, k in ((1, 4096, 4096), (64, 64, 16384), (512, 512, 512), (4096, 4096, 4096)):
            for knobs in fam.knob_grid(cfg, m, n, k):
                for knob, value in knobs._asdict().items():
                    assert value in fam.KNOB_SPACE[knob], (cfg.name, knobs)


@st.composite
def configs_from_space(draw, family: str) -> HgemmConfig:
    space = family_module(family).SPACE
    return HgemmConfig(family=family, **{field: draw(st.sampled_from(values)) for field, values in space.items()})


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_feasible_is_pure_and_explains_refusals(family: str, data) -> None:
    fam = family_module(family)
    cfg = data.draw(configs_from_space(family))
    for arch in ARCHS:
        ok, reason = fam.feasible(cfg, arch)
        assert fam.feasible(cfg, arch) == (ok, reason)
        assert (reason == "") == ok
        if ok:
            assert HgemmConfig.from_name(cfg.name) == cfg


SM90_COOP = "sm90_tma_ws_fp16_nt_128x256x64_s0_c2x1_coop_persistent"
SM90_STREAMK = "sm90_tma_ws_fp16_nt_128x128x64_s0_c1x1_coop_streamk"
SM80 = "sm80_cute_fp16_nt_64x64x64_s3_w4"
SM80_SLOWER = "sm80_cute_fp16_nt_128x128x32_s4_w4"
DECODE = "decode_fp16_nt_8x128x128_s4_w8"


def test_knob_grids_per_family():
    swizzle_raster = {Knobs(0, s, r) for s in (1, 2, 4, 8) for r in (1, 2)}
    assert set(knob_grid(SM90_COOP, 8192, 8192, 8192)) == swizzle_raster
    assert set(knob_grid(SM90_STREAMK, 64, 64, 8192)) == swizzle_raster | {Knobs(s) for s in (1, 2, 4)}
    sm80_square = knob_grid(SM80, 4096, 4096, 1024)
    assert set(sm80_square) == {Knobs(0, g, r) for g in (4, 8) for r in (1, 2)}
    splits = {Knobs(s) for s in (1, 2, 4, 8, 16, 32)}
    assert set(knob_grid(SM80, 64, 256, 4096)) == set(sm80_square) | splits
    assert set(knob_grid(SM80, 64, 64, 64)) == set(sm80_square) | {Knobs(1)}   # one K tile: no split
    assert set(knob_grid(SM80, 1024, 2048, 4096)) == set(sm80_square) | {Knobs(1), Knobs(2)}  # <= 1024 CTAs
    assert knob_grid(DECODE, 4, 4096, 4096) == [Knobs(s) for s in (1, 2, 4, 8, 16, 32)]
    assert knob_grid(DECODE, 4, 4096, 512) == [Knobs(1), Knobs(2), Knobs(4)]   # 4 K tiles
    assert knob_grid("an_external_kernel", 64, 64, 64) == []
    for name in (SM90_COOP, SM90_STREAMK, SM80, DECODE):
        grid = knob_grid(name, 64, 256, 4096)
        assert DEFAULT_KNOBS not in grid and len(set(grid)) == len(grid)
