"""The GPU path equals Lightning's stock "16-mixed" path at the paper's size, on a CPU."""

import pytest
import torch

from uniform_herding.runs import selftest


@pytest.mark.trains
def test_paper_size_gpu_path_equals_lightnings_stock_path(gpu_like_fp16_conv, uninitialised_memory_is_nan):
    """Width 64, batch 128 + 64 replayed, KD, clip 1.0, scaler from 2^16, 6 steps with overflows forced at
    step 1 (the fused optimizer's first step: its momentum buffers are still unfilled) and step 3. Both
    paths skip the same steps, follow the same scale sequence and end with the same weights up to fp16
    rounding; our on-device skip counter agrees. Without the zero-filled momentum buffers our weights go
    NaN here (uninitialised memory is NaN in this test)."""
    c = selftest.compare(torch.device("cpu"), width=64, steps=6)
    assert c.failures() == []
    assert c.ours.skipped == [1, 3] and c.skipped_counted == 2  # at width 64 nothing else overflows at 2^16
    assert c.ours.scales == [2.0**16, 2.0**15, 2.0**15, 2.0**14, 2.0**14, 2.0**14]
    assert c.max_update > 0


@pytest.mark.trains
def test_the_comparison_catches_a_path_that_diverges(gpu_like_fp16_conv, uninitialised_memory_is_nan, monkeypatch):
    """With torch's fused SGD as it is (no zero-filled buffers) the self-test fails: it can fail."""
    from uniform_herding.method import engine

    monkeypatch.setattr(engine, "zero_fill_momentum", lambda optimizer: None)
    c = selftest.compare(torch.device("cpu"), width=8, steps=4)
    assert "weights not finite (ours False, reference True)" in c.failures()


@pytest.mark.trains
def test_the_self_test_reads_both_paths_before_lightnings_teardown(gpu_like_fp16_conv, teardown_to_meta):
    """On a GPU the Trainer's teardown leaves the reference path's module on the CPU; here on `meta`: the
    comparison reads its weights before that, and still agrees (our loop moves nothing)."""
    c = selftest.compare(torch.device("cpu"), width=8, steps=4)
    assert c.failures() == [] and {1, 2} <= set(c.ours.skipped)  # width 8 may overflow at step 0 too


@pytest.mark.trains
def test_under_uh_compile_both_paths_are_compiled_alike_and_agree(gpu_like_fp16_conv, monkeypatch):
    """UH_COMPILE compiles our path's models in fit_task; the reference's are compiled alike (same mode), so the
    self-test compares the two step implementations on the same kernels, with the same scale sequence and
    tolerance, instead of inductor's rounding against eager's."""
    from uniform_herding.method import engine

    if need := engine.compiler_missing():
        pytest.skip(f"torch.compile needs {need} on this host")
    monkeypatch.setenv("UH_COMPILE", "default")
    compiled = []
    compile_backbone = engine.compile_backbone
    monkeypatch.setattr(engine, "compile_backbone", lambda m: (compiled.append(m), compile_backbone(m))[1])
    monkeypatch.setattr(selftest, "compile_backbone", engine.compile_backbone)
    c = selftest.compare(torch.device("cpu"), width=8, steps=4)
    assert len(compiled) == 4 and all(m.backbone._compiled_call_impl is not None for m in compiled)  # both paths
    assert c.failures() == [] and {1, 2} <= set(c.ours.skipped)
