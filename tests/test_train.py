"""Loss pieces: margin only on the target in training, KD on margin-free logits, iCaRL's BCE targets."""

import dataclasses
import functools

import pytest
import torch
import torch.nn.functional as F

from uniform_herding.config import resolve
from uniform_herding.train import icarl_bce, kd_loss, margin_logits, task_loss


def test_margin_only_on_target_logit():
    logits = torch.zeros(3, 4)
    y = torch.tensor([0, 2, 3])
    out = margin_logits(logits, y, s=30.0, m=0.35)
    expected = torch.zeros(3, 4)
    expected[torch.arange(3), y] = -30.0 * 0.35
    assert torch.allclose(out, expected)


def test_kd_matches_definition():
    torch.manual_seed(0)
    s, t = torch.randn(5, 3), torch.randn(5, 3)
    T = 2.0
    p_t = F.softmax(t / T, dim=1)
    manual = T * T * (p_t * (p_t.log() - F.log_softmax(s / T, dim=1))).sum(dim=1).mean()
    assert kd_loss(s, t, T).item() == pytest.approx(manual.item(), rel=1e-5)
    assert kd_loss(t, t, T).item() == pytest.approx(0.0, abs=1e-6)


def test_ce_kd_uses_margin_for_ce_but_margin_free_logits_for_kd():
    cfg = resolve("B3", "smoke")
    torch.manual_seed(0)
    logits, teacher = torch.randn(4, 6), torch.randn(4, 4)
    y = torch.tensor([0, 5, 4, 2])
    ce = F.cross_entropy(margin_logits(logits, y, cfg.cos_scale, cfg.cos_margin), y)
    kd = kd_loss(logits[:, :4], teacher, cfg.kd_temperature)  # margin-free student logits
    assert task_loss(cfg, logits, y, teacher).item() == pytest.approx((ce + kd).item(), rel=1e-5)
    # with the margin wrongly kept in the KD term the value would differ
    wrong = kd_loss(margin_logits(logits, y, cfg.cos_scale, cfg.cos_margin)[:, :4], teacher, 2.0)
    assert (ce + wrong).item() != pytest.approx((ce + kd).item(), rel=1e-5)


def test_no_kd_and_linear_head_variants():
    torch.manual_seed(0)
    logits, teacher, y = torch.randn(4, 6), torch.randn(4, 4), torch.tensor([0, 5, 4, 2])
    a1 = resolve("a1", "smoke")
    expected = F.cross_entropy(margin_logits(logits, y, a1.cos_scale, a1.cos_margin), y)
    assert task_loss(a1, logits, y, teacher).item() == pytest.approx(expected.item(), rel=1e-6)
    a3 = resolve("a3", "smoke")  # linear head: no margin
    expected = F.cross_entropy(logits, y) + kd_loss(logits[:, :4], teacher, 2.0)
    assert task_loss(a3, logits, y, teacher).item() == pytest.approx(expected.item(), rel=1e-6)


def test_icarl_bce_targets():
    logits = torch.zeros(2, 4)
    teacher = torch.tensor([[2.0, -1.0], [0.0, 3.0]])
    y = torch.tensor([3, 0])
    targets = torch.tensor(
        [
            [torch.sigmoid(torch.tensor(2.0)), torch.sigmoid(torch.tensor(-1.0)), 0, 1],
            [0.5, torch.sigmoid(torch.tensor(3.0)), 0, 0],
        ]
    )
    expected = F.binary_cross_entropy_with_logits(logits, targets)
    assert icarl_bce(logits, y, teacher).item() == pytest.approx(expected.item(), rel=1e-6)
    # first task: plain one-hot
    assert icarl_bce(logits, y, None).item() == pytest.approx(
        F.binary_cross_entropy_with_logits(logits, F.one_hot(y, 4).float()).item()
    )
    b1 = dataclasses.replace(resolve("B1", "smoke"))
    assert task_loss(b1, logits, y, teacher).item() == pytest.approx(expected.item(), rel=1e-6)


def test_learner_trains_in_train_mode_after_an_evaluation(tiny_stream):
    """Evaluation leaves the learner in eval mode; Lightning keeps it, so fit_task must switch back
    (otherwise BatchNorm statistics freeze after task 0)."""
    from uniform_herding.model import Learner
    from uniform_herding.train import TaskModule, fit_task, freeze

    cfg = dataclasses.replace(resolve("B3", "smoke"), epochs=1, train_per_class=10)
    stream = tiny_stream(cfg)
    learner = Learner(cfg.width, cfg.head, cfg.cos_scale)
    learner.head.grow(cfg.classes_per_task)
    teacher = freeze(learner)
    learner.eval()
    seen = []

    class Probe(TaskModule):
        def training_step(self, batch, batch_idx):
            seen.append((self.learner.training, self.teacher.training))
            return super().training_step(batch, batch_idx)

    gen = torch.Generator().manual_seed(0)
    fit_task(Probe(cfg, learner, teacher, stream, None, gen), stream.train_items(0), torch.device("cpu"), False)
    assert seen and all(student and not teach for student, teach in seen)
    running = learner.backbone.stem[1].running_mean
    assert not torch.equal(running, torch.zeros_like(running))  # BatchNorm statistics moved


def one_step(tiny_stream, monkeypatch, gpu_path: bool, init_scale: float) -> tuple[list, list, object]:
    """One training step of task 1 (teacher, replay, KD) from a fixed init: parameters before and after,
    and the module. The GPU path's grad scaler starts at `init_scale`."""
    from uniform_herding.model import Learner
    from uniform_herding.train import TaskModule, fit_task, freeze

    cfg = dataclasses.replace(resolve("B3", "smoke"), epochs=1, train_per_class=20)
    stream = tiny_stream(cfg)
    torch.manual_seed(0)
    learner = Learner(cfg.width, cfg.head, cfg.cos_scale)
    learner.head.grow(cfg.classes_per_task)
    teacher = freeze(learner)
    learner.head.grow(cfg.classes_per_task)
    before = [p.detach().clone() for p in learner.parameters()]
    module = TaskModule(cfg, learner, teacher, stream, stream.train_items(0), torch.Generator().manual_seed(0))
    module.gpu_path = gpu_path
    monkeypatch.setattr(torch.amp, "GradScaler", functools.partial(torch.amp.GradScaler, init_scale=init_scale))
    fit_task(module, stream.train_items(1)[: cfg.batch_size], torch.device("cpu"), False)
    return before, [p.detach().clone() for p in learner.parameters()], module


def test_gpu_path_runs_on_cpu_and_matches_the_fp32_step(tiny_stream, monkeypatch):
    """The CUDA-only wiring (fp16 autocast + loss scaling, fused SGD, our own unscale before the clip),
    run on a CPU: one step moves the weights like the fp32 reference step, up to fp16 rounding.
    Clipping the still-scaled gradients would shrink the update by up to the loss scale. (The scale
    starts at 2^8: at Lightning's 2^16 this tiny model's first fp16 step overflows and is skipped.)"""
    before, ref, _ = one_step(tiny_stream, monkeypatch, gpu_path=False, init_scale=2.0**8)
    before_gpu, fast, module = one_step(tiny_stream, monkeypatch, gpu_path=True, init_scale=2.0**8)
    assert all(torch.equal(a, b) for a, b in zip(before, before_gpu, strict=True))
    optimizer = module.trainer.optimizers[0]
    assert optimizer.defaults["fused"] and module.trainer.precision_plugin.scaler is not None
    d_ref = torch.cat([(a - b).flatten() for a, b in zip(ref, before, strict=True)])
    d_fast = torch.cat([(a - b).flatten() for a, b in zip(fast, before, strict=True)])
    assert d_ref.norm() > 0
    assert F.cosine_similarity(d_ref, d_fast, dim=0) > 0.99
    assert d_fast.norm() / d_ref.norm() == pytest.approx(1.0, abs=0.05)


def test_gpu_path_skips_a_step_whose_scaled_gradients_overflow(tiny_stream, monkeypatch):
    """found_inf reaches the fused SGD as a tensor: an overflowing step changes no weight, and the
    scaler halves its scale."""
    before, after, module = one_step(tiny_stream, monkeypatch, gpu_path=True, init_scale=2.0**100)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert module.trainer.precision_plugin.scaler.get_scale() == 2.0**99


@pytest.mark.parametrize(
    ("value", "mode"),
    [("", None), ("0", None), ("1", "default"), ("reduce-overhead", "reduce-overhead"),
     ("max-autotune", "max-autotune")],
)
def test_uh_compile_setting(monkeypatch, value, mode):
    from uniform_herding.train import compile_mode

    monkeypatch.setenv("UH_COMPILE", value)
    assert compile_mode() == mode


def test_a_bad_uh_compile_is_one_error_line_before_anything_runs(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from uniform_herding.cli import main

    monkeypatch.setenv("UH_COMPILE", "yes")
    result = CliRunner().invoke(main, ["run", "B3", "--profile", "smoke", "--results-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "UH_COMPILE='yes' is not a setting; use 0, 1, reduce-overhead, max-autotune" in result.output
    assert not any(tmp_path.iterdir())



@pytest.mark.parametrize("ntasks", [None, "1"])
def test_a_run_inside_a_slurm_job_trains_as_a_plain_process(tiny_stream, monkeypatch, recwarn, ntasks):
    """With SLURM_* set and srun on the PATH, fit_task neither warns about srun (Lightning does where
    SLURM_NTASKS is unset) nor picks SLURMEnvironment with its SIGUSR1 requeue handler (where it is set)."""
    import lightning as L
    from lightning.fabric.plugins.environments import SLURMEnvironment

    for name, value in {"SLURM_JOB_ID": "17", "SLURM_JOB_NAME": "uh", "SLURM_NTASKS": ntasks}.items():
        monkeypatch.delenv(name, raising=False) if value is None else monkeypatch.setenv(name, value)
    monkeypatch.setattr("shutil.which", lambda name, *a, **k: "/usr/bin/srun" if name == "srun" else None)
    environments = []
    fit = L.Trainer.fit
    monkeypatch.setattr(L.Trainer, "fit", lambda self, *a, **k: (environments.append(
        self._accelerator_connector.cluster_environment), fit(self, *a, **k)))  # fmt: skip  (what signals use)
    one_step(tiny_stream, monkeypatch, gpu_path=False, init_scale=1.0)
    assert not [str(w.message) for w in recwarn if "srun" in str(w.message)]
    assert len(environments) == 1 and not isinstance(environments[0], SLURMEnvironment)
