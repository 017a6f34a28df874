"""The kernel space as data: every family's kernel template parameters and runtime knobs, with their meanings.

A point is a JSON object {"family", "dtype", "layout", <HgemmConfig fields>..., "splits", "swizzle", "raster"}, i.e. a
kernel config plus its runtime knobs; the choices of each field come from the family module's `SPACE` /
`KNOB_SPACE`, feasibility from its `feasible(cfg, arch)`. The same schema is shown verbatim to the search's LLM and is
what its policy's categorical dimensions range over (`search.candidate_space` wraps points into candidates).
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any

from cudal2_catalog.config import FAMILIES, FAMILY_FIELDS, HgemmConfig, Knobs
from cudal2_catalog.families import family_module

# HgemmConfig fields a point chooses (dtype and layout come from the problem) and the runtime knobs.
CONFIG_FIELDS = ("tile_m", "tile_n", "tile_k", "stages", "cluster_m", "cluster_n", "schedule", "scheduler", "warps",
                 "swap_ab", "epilogue", "splitk", "reg_pipeline", "smem_prefetch", "stagger_ab", "weight_stream")
KNOB_FIELDS = Knobs._fields
POINT_FIELDS = ("family", "dtype", "layout", *CONFIG_FIELDS, *KNOB_FIELDS)

MEANINGS = {
    "family": "kernel family: sm90_tma_ws (CUTLASS 3 TMA + WGMMA, Hopper), sm80_cute (CuTe mma.sync, sm80+), "
              "decode (mma.sync split-K for small M), tiny (mma.sync, latency-bound: tiny GEMMs and long K with "
              "small M x N, K split over warps and cluster CTAs)",
    "dtype": "input/output element type (accumulation is fp32)",
    "layout": "nn: B is [K, N]; nt: B is [N, K] (nn.Linear weight)",
    "tile_m": "CTA tile rows of D (with swap_ab: rows of the weight)",
    "tile_n": "CTA tile columns of D (with swap_ab: rows of A)",
    "tile_k": "K depth of one mainloop stage",
    "stages": "shared-memory pipeline stages (0 = as many as fit)",
    "cluster_m": "thread-block cluster size along M (TMA multicast of B)",
    "cluster_n": "thread-block cluster size along N (TMA multicast of A)",
    "schedule": "sm90 warp specialization: coop (2 consumer warpgroups on one tile) or pingpong (alternating tiles)",
    "scheduler": "sm90 tile scheduler: persistent (data parallel) or streamk (K work split evenly over SMs)",
    "warps": "warps per CTA (sm80_cute, decode, tiny)",
    "swap_ab": "compute D^T = B A^T so that small M sits on the MMA's narrow N side (sm90, nt only)",
    "epilogue": "'' = stage D in shared memory (sm90: TMA store; sm80_cute: 128-bit stores); nosmem = store from "
                "registers (sm90 persistent; sm80_cute: 32-bit stores of column pairs, no shared-memory round trip)",
    "splitk": "'' = the family's split-K reduction; workspace = partials always through a workspace (sm80_cute)",
    "reg_pipeline": "sm80_cute: k-blocks (16 deep) of ldmatrix fragments in registers at once: 2 = load k-block i+1 "
                    "while the MMAs of i run (default), 1 = load i then compute it (fewer registers), 3 = two "
                    "k-blocks ahead (tile_k 64; refused when the register estimate exceeds 255 per thread)",
    "smem_prefetch": "sm80_cute: K tiles the cp.async pipeline runs ahead, 1..stages-2 (0 = stages-1, the deepest)",
    "stagger_ab": "sm80_cute: issue a K tile's B copies one k-block after its A copies, between the MMAs (spreads "
                  "the global loads)",
    "weight_stream": "decode: how the weight tiles reach shared memory: '' = cp.async into padded rows (default), "
                     "evictfirst = the same with an L2 evict-first hint, tma = 2-D tensor-map copies into a swizzled "
                     "ring with evict-first (sm90; NT needs tile_k % 64 == 0, NN tile_n % 64 == 0)",
    "splits": "runtime split-K parts (0 = the kernel's automatic choice; stream-K decomposition on sm90; tiny: CTAs of "
              "a cluster, 1..8)",
    "swizzle": "runtime CTA swizzle group: output tiles walked together for L2 reuse (0 = default)",
    "raster": "runtime raster order: 1 = along M, 2 = along N (0 = heuristic)",
}


CONFIG_DEFAULTS = {f.name: f.default for f in dataclasses.fields(HgemmConfig) if f.name in CONFIG_FIELDS}


def family_space(family: str) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """(config field -> choices, knob -> choices) of `family`, from its module's SPACE and KNOB_SPACE; a code-level
    field of another family (config.FAMILY_FIELDS) that SPACE leaves out has HgemmConfig's default as its one choice."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; supported: {FAMILIES}")
    module = family_module(family)
    fields = {name: (CONFIG_DEFAULTS[name],) for name, owner in FAMILY_FIELDS.items() if owner != family}
    fields.update(module.SPACE)
    return fields, module.KNOB_SPACE


def families_for(arch: int) -> tuple[str, ...]:
    """The families whose kernels run on compute capability `arch` (e.g. 90)."""
    return tuple(f for f in FAMILIES if family_module(f).SM_MIN <= arch <= family_module(f).SM_MAX)


def schema(family: str | None = None) -> dict[str, Any]:
    """JSON-able description of the space (all families, or one): per family its target compute capabilities and,
    for each config field and knob, the choices and a one-line meaning. Shown verbatim in LLM prompts."""
    out: dict[str, Any] = {"point_fields": list(POINT_FIELDS), "families": {}}
    for fam in (family,) if family else FAMILIES:
        fields, knobs = family_space(fam)
        module = family_module(fam)
        out["families"][fam] = {
            "compute_capability": [module.SM_MIN, module.SM_MAX],
            "fields": {f: {"choices": list(fields[f]), "meaning": MEANINGS[f]} for f in ("dtype", "layout",
                                                                                          *CONFIG_FIELDS)},
            "knobs": {k: {"choices": list(knobs[k]), "meaning": MEANINGS[k]} for k in KNOB_FIELDS},
        }
    return out


Point = tuple[HgemmConfig, Knobs]


def parse_point(doc: dict) -> Point:
    """The (config, knobs) a JSON point spells. Fields left out take HgemmConfig's / the knobs' defaults; raises
    ValueError naming the field when one is unknown or its value is not among the family's choices."""
    if not isinstance(doc, dict):
        raise ValueError(f"a point is a JSON object with fields {POINT_FIELDS}, got {type(doc).__name__}")
    unknown = sorted(set(doc) - set(POINT_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}; a point has {list(POINT_FIELDS)}")
    for required in ("family", "dtype", "layout", "tile_m", "tile_n", "tile_k"):
        if required not in doc:
            raise ValueError(f"field {required!r} is required")
    fields, knob_choices = family_space(doc["family"])
    defaults = {f.name: f.default for f in dataclasses.fields(HgemmConfig) if f.default is not dataclasses.MISSING}
    values = {f: doc.get(f, defaults.get(f)) for f in ("dtype", "layout", *CONFIG_FIELDS)}
    for name, value in values.items():
        if value not in fields[name] or type(value) is not type(fields[name][0]):
            raise ValueError(f"{doc['family']}: {name}={value!r} is not one of {list(fields[name])}")
    knobs = Knobs(*(doc.get(k, 0) for k in KNOB_FIELDS))
    for name, value in zip(KNOB_FIELDS, knobs):
        if value not in knob_choices[name] or type(value) is not int:
            raise ValueError(f"{doc['family']}: knob {name}={value!r} is not one of {list(knob_choices[name])}")
    return HgemmConfig(family=doc["family"], **values), knobs


def point_of(cfg: HgemmConfig, knobs: Knobs) -> dict[str, Any]:
    """The JSON point of a config and its knobs (inverse of parse_point)."""
    point = {"family": cfg.family, "dtype": cfg.dtype, "layout": cfg.layout}
    point.update({f: getattr(cfg, f) for f in CONFIG_FIELDS})
    point.update(Knobs(*knobs).to_dict())
    return point


def check(cfg: HgemmConfig, knobs: Knobs, arch: int) -> tuple[bool, str]:
    """Whether `cfg` with `knobs` may be compiled and run on compute capability `arch` (e.g. 90): knobs in the
    family's space and the family's feasibility check; the reason when not."""
    _, knob_choices = family_space(cfg.family)
    for name, value in zip(KNOB_FIELDS, knobs):
        if value not in knob_choices[name]:
            return False, f"knob {name}={value} is not one of {list(knob_choices[name])}"
    return family_module(cfg.family).feasible(cfg, arch)


def sample(rng: random.Random, dtype: str, layout: str, arch: int, max_tries: int = 1000) -> Point:
    """A uniformly random feasible point of `dtype` / `layout` on `arch` (rejection sampling over the families'
    choices); raises RuntimeError when `max_tries` draws found none."""
    families = families_for(arch)
    if not families:
        raise ValueError(f"no kernel family targets compute capability {arch}")
    for _ in range(max_tries):
        family = rng.choice(families)
        fields, knobs = family_space(family)
        doc = {"family": family, "dtype": dtype, "layout": layout}
        doc.update({f: rng.choice(fields[f]) for f in CONFIG_FIELDS})
        doc.update({k: rng.choice(knobs[k]) for k in KNOB_FIELDS})
        point = parse_point(doc)
        if check(*point, arch)[0]:
            return point
    raise RuntimeError(f"no feasible {dtype}/{layout} point on sm{arch} in {max_tries} random draws")


def neighbours(cfg: HgemmConfig, knobs: Knobs, rng: random.Random) -> list[Point]:
    """Every point one step away from (cfg, knobs) (one field or knob moved to an adjacent choice), shuffled by
    `rng`; feasibility is not checked (use `check`)."""
    point = point_of(cfg, knobs)
    fields, knob_choices = family_space(cfg.family)
    choices = {**fields, **knob_choices}
    out = []
    for name in (*CONFIG_FIELDS, *KNOB_FIELDS):
        values = choices[name]
        i = values.index(point[name])
        for j in (i - 1, i + 1):
            if 0 <= j < len(values):
                out.append(parse_point({**point, name: values[j]}))
    rng.shuffle(out)
    return out
