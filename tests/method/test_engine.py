"""engine.py: the fused SGD's zero-filled momentum (the torch defect it works around, and that it fixes), the
precision setting, UH_COMPILE, and Lightning's settings: one plain process inside Slurm, quiet notices."""

import dataclasses

import pytest
import torch

from uniform_herding.catalogue import resolve


def fused_and_unfused_after_a_skipped_first_step(make_fused) -> tuple[torch.Tensor, torch.Tensor]:
    """The defect's minimal case at the paper's loss scale 2^16: a first step whose scaled gradient is
    inf (skipped), then a finite one, through `make_fused` and through unfused torch SGD."""
    cfg = resolve("B3", "paper")
    out = []
    for make in (
        make_fused,
        lambda params: torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay),
    ):
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(1000))
        optimizer, scaler = make([w]), torch.amp.GradScaler("cpu", init_scale=2.0**16)
        for factor in (float("inf"), 1.0):
            optimizer.zero_grad()
            scaler.scale((w * factor).sum()).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_([w], cfg.grad_clip)
            scaler.step(optimizer)
            scaler.update()
        out.append(w.detach().clone())
    return out[0], out[1]


def test_stock_fused_sgd_reads_uninitialised_momentum_after_a_skipped_first_step(uninitialised_memory_is_nan):
    """The torch 2.11 defect the workaround exists for; when torch fixes it, this fails and says so."""
    cfg = resolve("B3", "paper")
    fused, unfused = fused_and_unfused_after_a_skipped_first_step(
        lambda params: torch.optim.SGD(
            params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, fused=True
        )
    )
    assert torch.isfinite(unfused).all()
    assert not torch.isfinite(fused).all()


def test_our_fused_sgd_after_a_skipped_first_step_equals_unfused_sgd(uninitialised_memory_is_nan):
    from uniform_herding.method.train import sgd

    cfg = resolve("B3", "paper")
    fused, unfused = fused_and_unfused_after_a_skipped_first_step(lambda params: sgd(cfg, params, fused=True))
    assert torch.equal(fused, unfused)


@pytest.mark.parametrize("first", [True, False])
def test_a_skipped_step_leaves_weights_and_optimizer_state_as_they_were(first, uninitialised_memory_is_nan):
    """A skipped step, first or later, changes neither the weights nor the optimizer state: after a first
    one they equal a fresh optimizer's."""
    from uniform_herding.method.train import sgd

    cfg = resolve("B3", "paper")
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(1000))
    optimizer, scaler = sgd(cfg, [w], fused=True), torch.amp.GradScaler("cpu", init_scale=2.0**16)

    def step(factor: float) -> None:
        optimizer.zero_grad()
        scaler.scale((w * factor * torch.linspace(-1, 1, 1000)).sum()).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()

    if not first:
        step(1.0)
    before = w.detach().clone()
    state = {k: v.clone() for k, v in optimizer.state[w].items()}
    step(float("inf"))
    assert torch.equal(w, before)
    assert optimizer.state[w].keys() == state.keys()
    assert all(torch.equal(optimizer.state[w][k], v) for k, v in state.items())
    if first:
        fresh = sgd(cfg, [torch.nn.Parameter(before.clone())], fused=True)
        fresh_state = fresh.state[fresh.param_groups[0]["params"][0]]
        assert all(torch.equal(v, torch.zeros_like(w)) for v in fresh_state.values())
        assert all(torch.equal(v, torch.zeros_like(w)) for v in state.values())
    assert scaler.get_scale() == 2.0**15


def test_precision_defaults_and_refuses_unknown_values():
    from uniform_herding.method.engine import precision

    assert precision(torch.device("cpu")) == "32-true"
    assert precision(torch.device("cuda")) == "16-mixed"
    assert precision(torch.device("cpu"), "16-mixed") == "16-mixed"
    assert precision(torch.device("cpu"), "16-mixed").fp16 and not precision(torch.device("cpu")).fp16  # the loop reads
    with pytest.raises(ValueError, match="precision 'bf16' is not a setting; use 16-mixed or 32-true"):
        precision(torch.device("cpu"), "bf16")


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("", None),
        ("0", None),
        ("1", "default"),
        ("reduce-overhead", "reduce-overhead"),
        ("max-autotune", "max-autotune"),
    ],
)
def test_uh_compile_setting(monkeypatch, value, mode):
    from uniform_herding.method.engine import compile_mode

    monkeypatch.setenv("UH_COMPILE", value)
    assert compile_mode() == mode


@pytest.mark.parametrize(
    ("lacks", "message"),
    [
        ("compiler", "UH_COMPILE='1' needs a C compiler (gcc or clang, or CC) to build torch.compile's kernels"),
        ("headers", "UH_COMPILE='1' needs Python's headers ("),
    ],
)
def test_uh_compile_on_a_host_that_cannot_build_kernels_is_refused_before_anything_runs(
    lacks, message, monkeypatch, tmp_path
):
    """The image has no C compiler and no Python.h: torch.compile would fail inside the first task's fit."""
    import shutil
    import sysconfig

    from click.testing import CliRunner

    from uniform_herding.cli import main

    monkeypatch.setenv("UH_COMPILE", "1")
    monkeypatch.delenv("CC", raising=False)
    if lacks == "compiler":
        monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    else:
        monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {"include": str(tmp_path / "no-headers")})
    result = CliRunner().invoke(main, ["run", "B3", "--profile", "smoke", "--results-dir", str(tmp_path / "r")])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and message in result.output, result.output
    assert "install it (Debian/Ubuntu: gcc python3-dev; the image has neither), or unset UH_COMPILE" in result.output
    assert not (tmp_path / "r").exists()


def test_a_bad_uh_compile_is_one_error_line_before_anything_runs(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from uniform_herding.cli import main

    monkeypatch.setenv("UH_COMPILE", "yes")
    result = CliRunner().invoke(main, ["run", "B3", "--profile", "smoke", "--results-dir", str(tmp_path)])
    assert result.exit_code == 2  # bad input, not a failed run
    assert "UH_COMPILE='yes' is not a setting; use 0, 1, reduce-overhead, max-autotune" in result.output
    assert not any(tmp_path.iterdir())


@pytest.mark.trains
@pytest.mark.parametrize("ntasks", [None, "1"])
def test_a_run_inside_a_slurm_job_trains_as_a_plain_process(tiny_stream, monkeypatch, recwarn, ntasks):
    """With SLURM_* set and srun on the PATH, fit_task neither warns about srun (Lightning does where
    SLURM_NTASKS is unset) nor installs a signal handler (submitit's requeue handler stays the only one)."""
    import signal

    for name, value in {"SLURM_JOB_ID": "17", "SLURM_JOB_NAME": "uh", "SLURM_NTASKS": ntasks}.items():
        monkeypatch.delenv(name, raising=False) if value is None else monkeypatch.setenv(name, value)
    monkeypatch.setattr("shutil.which", lambda name, *a, **k: "/usr/bin/srun" if name == "srun" else None)
    from uniform_herding.method.model import Learner
    from uniform_herding.method.train import fit_task

    cfg = dataclasses.replace(resolve("B3", "smoke"), epochs=1, train_per_class=10)
    stream = tiny_stream(cfg)
    learner = Learner(cfg.width, cfg.head, cfg.cos_scale)
    learner.head.grow(cfg.classes_per_task)
    signals = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)
    handlers = [signal.getsignal(s) for s in signals]
    fit_task(cfg, learner, None, stream, None, stream.train_items(0), torch.Generator().manual_seed(0))
    assert not [str(w.message) for w in recwarn if "srun" in str(w.message)]
    assert [signal.getsignal(s) for s in signals] == handlers


def test_lightnings_tensor_core_tip_is_quiet(monkeypatch, caplog):
    """Lightning logs a tip to lower fp32 matmul precision on GPUs with tensor cores; it is not followed
    (it would change fp32 numerics) and not printed."""
    import logging

    from lightning.fabric.accelerators import cuda

    from uniform_herding.method.engine import quiet_lightning

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "_is_ampere_or_later", lambda device=None: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100")
    quiet_lightning()
    with caplog.at_level(logging.NOTSET):
        caplog.handler.setLevel(logging.NOTSET)
        cuda._check_cuda_matmul_precision(torch.device("cuda"))
    assert not [r for r in caplog.records if "Tensor Cores" in r.getMessage()]
    assert torch.get_float32_matmul_precision() == "highest"
