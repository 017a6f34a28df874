"""studies.pdl_effect: PDL on/off time ratios by family and bucket from two sweeps."""
from studies import pdl_effect


def sweep(kernel_us, baseline_us):
    return {"rows": [{"layout": "nt", "dtype": "fp16", "m": 64, "n": 64, "k": 64, "baseline_us": baseline_us,
                      "candidates": [{"kernel": "sm90_tma_ws_fp16_nt_64x128x64_s0_c1x1_pingpong_persistent",
                                      "us": kernel_us, "correct": True},
                                     {"kernel": "sm80_cute_fp16_nt_64x64x64_s3_w4", "us": 4.0, "correct": False}]}]}


def test_ratios_of_kernels_timed_correct_in_both():
    text = "\n".join(pdl_effect.effect_lines(sweep(3.0, 5.0), sweep(4.0, 5.0)))
    assert text.startswith("1 (problem, kernel, knobs)")
    assert "| sm90 | 0.750 (1.000; n 1) | - |" in text and "| sm80 |" not in text
