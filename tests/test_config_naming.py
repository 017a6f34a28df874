"""HgemmConfig: the name is the whole identity and parses back; bad fields are rejected. Knobs: the ABI's order."""
import pytest

from cudal2_catalog.config import DEFAULT_KNOBS, HgemmConfig, Knobs


@pytest.mark.parametrize("cfg", [
    HgemmConfig("sm90_tma_ws", "fp16", "nt", 128, 256, 64, cluster_n=2, schedule="coop", scheduler="persistent"),
    HgemmConfig("sm90_tma_ws", "fp16", "nn", 128, 128, 64, cluster_n=2, schedule="pingpong", scheduler="persistent"),
    HgemmConfig("sm80_cute", "bf16", "nn", 64, 64, 32, stages=3, warps=4),
    HgemmConfig("decode", "fp16", "nt", 8, 64, 256, stages=4, warps=4),
    HgemmConfig("sm90_tma_ws", "bf16", "nt", 64, 16, 128, schedule="pingpong", scheduler="persistent", swap_ab=True),
    HgemmConfig("sm90_tma_ws", "fp16", "nt", 64, 64, 64, schedule="pingpong", scheduler="persistent",
                epilogue="nosmem"),
    HgemmConfig("sm80_cute", "fp16", "nt", 32, 32, 64, stages=4, warps=2, splitk="workspace"),
    HgemmConfig("sm80_cute", "fp16", "nn", 160, 96, 32, stages=3, warps=4, epilogue="nosmem", reg_pipeline=1,
                smem_prefetch=1, stagger_ab=True),
    HgemmConfig("sm80_cute", "bf16", "nt", 64, 64, 64, stages=4, warps=4, splitk="workspace", reg_pipeline=3),
])
def test_name_round_trip(cfg):
    assert HgemmConfig.from_name(cfg.name) == cfg
    assert cfg.name.startswith(f"{cfg.family}_{cfg.dtype}_{cfg.layout}_")


def test_distinct_configs_have_distinct_names():
    a = HgemmConfig("sm80_cute", "fp16", "nt", 64, 64, 32, stages=3, warps=4)
    b = HgemmConfig("sm80_cute", "fp16", "nt", 64, 64, 32, stages=4, warps=4)
    assert a.name != b.name


@pytest.mark.parametrize("field,value", [("family", "sm70"), ("dtype", "fp32"), ("layout", "tn")])
def test_bad_fields_rejected(field, value):
    kwargs = dict(family="sm80_cute", dtype="fp16", layout="nt", tile_m=64, tile_n=64, tile_k=32)
    kwargs[field] = value
    with pytest.raises(ValueError, match="unknown"):
        HgemmConfig(**kwargs)


def test_default_code_choices_stay_out_of_the_name():
    cfg = HgemmConfig("sm80_cute", "fp16", "nt", 64, 64, 32, stages=3, warps=4)
    assert cfg.name == "sm80_cute_fp16_nt_64x64x32_s3_w4"
    assert HgemmConfig("sm90_tma_ws", "fp16", "nt", 64, 64, 64, schedule="pingpong", scheduler="persistent",
                       epilogue="nosmem").name == "sm90_tma_ws_fp16_nt_64x64x64_s0_c1x1_pingpong_persistent_nosmem"
    assert HgemmConfig("sm80_cute", "bf16", "nn", 32, 64, 64, stages=4, warps=2,
                       splitk="workspace").name == "sm80_cute_bf16_nn_32x64x64_s4_w2_workspace"


@pytest.mark.parametrize("field", ["epilogue", "splitk"])
def test_unknown_code_choice_rejected(field):
    with pytest.raises(ValueError, match=f"unknown {field}"):
        HgemmConfig("sm80_cute", "fp16", "nt", 64, 64, 32, **{field: "bogus"})


@pytest.mark.parametrize("suffix", ["_bogus", "_r2", "_p0", "_stagger_r1"])
def test_non_canonical_name_rejected(suffix):
    with pytest.raises(ValueError):
        HgemmConfig.from_name("sm80_cute_fp16_nt_64x64x32_s3_w4" + suffix)


def test_code_level_fields_suffix_the_name_and_are_checked():
    cfg = HgemmConfig("sm80_cute", "fp16", "nt", 64, 64, 64, stages=4, warps=4, reg_pipeline=3, smem_prefetch=2,
                      stagger_ab=True)
    assert cfg.name == "sm80_cute_fp16_nt_64x64x64_s4_w4_r3_p2_stagger"
    for bad in (dict(reg_pipeline=0), dict(smem_prefetch=-1)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            HgemmConfig("sm80_cute", "fp16", "nt", 64, 64, 64, **bad)
    with pytest.raises(ValueError, match="reg_pipeline is a sm80_cute field"):
        HgemmConfig("tiny", "fp16", "nt", 32, 32, 64, reg_pipeline=1)


def test_knobs_follow_the_abi_order_and_default_to_zero():
    assert DEFAULT_KNOBS == Knobs() == (0, 0, 0)
    assert Knobs(2, 4, 1)._asdict() == {"splits": 2, "swizzle": 4, "raster": 1}
