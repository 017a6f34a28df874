"""Every family's declared search space (SPACE, KNOB_SPACE) agrees with its feasibility rules and knob grids."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from search.config import EPILOGUES, FAMILIES, SPLITK_POLICIES, HgemmConfig, Knobs
from search.families import family_module

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


@pytest.mark.parametrize("family", FAMILIES)
def test_space_names_every_config_field(family: str) -> None:
    fam = family_module(family)
    assert set(fam.SPACE) == set(CONFIG_FIELDS)
    assert all(isinstance(values, tuple) and values for values in fam.SPACE.values())
    assert set(fam.KNOB_SPACE) == set(Knobs._fields)
    assert all(0 in values for values in fam.KNOB_SPACE.values()), "0 (the kernel's default) is always a knob value"


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
            cfg = dataclasses.replace(base, **{field: value})
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
