"""Loss pieces: margin only on the target in training, KD on margin-free logits, iCaRL's BCE targets; the replay draw,
and one task's loop: backward, (unscale,) clip, step in that order, the fp16 path's autocast, its record, the
divergence guard."""

import dataclasses
import math
from collections.abc import Iterable

import pytest
import torch
import torch.nn.functional as F

from uniform_herding.catalogue import resolve
from uniform_herding.method.engine import Precision
from uniform_herding.method.train import icarl_bce, kd_loss, margin_logits, task_loss


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
    """CE on the margin logits plus T^2 KL(teacher || student) on the margin-free old-class logits, both written
    out here; the same loss with the margin left in the KD term is another number, and task_loss is not it."""
    cfg = resolve("B3", "smoke")
    torch.manual_seed(0)
    logits, teacher = torch.randn(4, 6), torch.randn(4, 4)
    y = torch.tensor([0, 5, 4, 2])  # rows 0 and 3 have old-class targets: the margin reaches their KD logits
    s, m, T = cfg.cos_scale, cfg.cos_margin, cfg.kd_temperature
    margin = logits.clone()
    margin[torch.arange(4), y] -= s * m
    ce = -(margin.log_softmax(dim=1)[torch.arange(4), y]).mean()

    def kd(student: torch.Tensor) -> torch.Tensor:
        p = (teacher / T).softmax(dim=1)
        return T * T * (p * (p.log() - (student[:, :4] / T).log_softmax(dim=1))).sum(dim=1).mean()

    loss = task_loss(cfg, logits, y, teacher).item()
    assert loss == pytest.approx((ce + kd(logits)).item(), rel=1e-5)
    assert abs(loss - (ce + kd(margin)).item()) > 1e-3  # with the margin kept in the KD term


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


@pytest.mark.trains
def test_learner_trains_in_train_mode_after_an_evaluation(tiny_stream):
    """Evaluation leaves the learner in eval mode; fit_task must switch it back (otherwise BatchNorm statistics
    freeze after task 0), and leave the frozen teacher in eval mode."""
    from uniform_herding.method.model import Learner
    from uniform_herding.method.train import Watch, fit_task, freeze

    cfg = dataclasses.replace(resolve("B3", "smoke"), epochs=1, train_per_class=10)
    stream = tiny_stream(cfg)
    learner = Learner(cfg.width, cfg.head, cfg.cos_scale)
    learner.head.grow(cfg.classes_per_task)
    teacher = freeze(learner)
    learner.eval()
    seen = []
    watch = Watch(after_backward=lambda student: seen.append((student.training, teacher.training)))
    fit_task(cfg, learner, teacher, stream, None, stream.train_items(0), torch.Generator().manual_seed(0), watch=watch)
    assert seen and all(student and not teach for student, teach in seen)
    running = learner.backbone.stem[1].running_mean
    assert not torch.equal(running, torch.zeros_like(running))  # BatchNorm statistics moved


def test_replay_draws_b_items_uniformly_with_replacement_from_the_stored_items(tiny_stream, monkeypatch):
    """Each step appends b = 16 draws to the current batch, each uniform over all stored items (not classes),
    with replacement. From n = 32 stored items a draw holds n (1 - (1 - 1/n)^b) = 12.75 distinct items on
    average (16 without replacement); over 300 steps each item is drawn 150 times on average."""
    from uniform_herding.method.train import inputs

    cfg = resolve("B3", "smoke")
    stream = tiny_stream(dataclasses.replace(cfg, train_per_class=30))
    monkeypatch.setattr(stream, "augment", lambda items, generator: items)  # the batch's items, unaugmented
    replay = torch.cat([stream.class_items[0][:24], stream.class_items[1][:8]])  # classes of unequal size
    gen = torch.Generator().manual_seed(0)
    current = stream.class_items[2][:5]
    b, n, steps = cfg.retrieval, len(replay), 300
    draws = []
    for _ in range(steps):
        items, labels = inputs(cfg, stream, current, replay, gen)
        assert torch.equal(items[: len(current)], current) and len(items) == len(current) + b
        assert torch.equal(labels, stream.train_y[items])
        draws.append(items[len(current) :])
    draws = torch.stack(draws)  # [steps, b]
    assert torch.isin(draws, replay).all()  # only stored items
    distinct = torch.tensor([len(d.unique()) for d in draws], dtype=torch.float64).mean().item()
    assert b == 16 and abs(distinct - n * (1 - (1 - 1 / n) ** b)) < 0.5  # repeats, as with replacement
    counts = torch.stack([(draws == item).sum() for item in replay])
    assert ((counts - steps * b / n).abs() < 60).all(), counts  # uniform over items: 150 each (std 12)


@pytest.mark.parametrize(
    ("stats", "reason"),
    [
        (dict(weights_finite=False), "weights not finite"),
        (dict(last_finite_loss=None), "no training step had a finite loss"),
        (dict(skipped_steps=43), "43 of 2520 steps skipped on fp16 overflow (at most 42)"),
        (dict(skipped_steps=42), None),
        (dict(), None),
    ],
)
def test_divergence_guard(stats, reason):
    from uniform_herding.method.train import TaskStats

    base = dict(
        steps=2520, skipped_steps=3, loss_scale=2.0**14, epoch_loss=[1.0], last_finite_loss=1.0, weights_finite=True
    )
    assert TaskStats(**{**base, **stats}).divergence() == reason


@pytest.mark.trains
@pytest.mark.parametrize(
    ("mode", "replays"), [(None, False), ("default", False), ("reduce-overhead", True), ("max-autotune", True)]
)
def test_every_mode_that_replays_cuda_graphs_marks_each_training_step(mode, replays, tiny_stream, monkeypatch):
    """max-autotune replays CUDA graphs as reduce-overhead does: each step must mark a new iteration
    (torch.compiler.cudagraph_mark_step_begin) so the last step's graph outputs may be overwritten."""
    from uniform_herding.method import engine, train

    monkeypatch.setattr(engine, "compile_mode", lambda: mode)
    monkeypatch.setattr(engine, "compile_backbone", lambda model: None)  # the mark, not the compile, under test
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    cfg, learner, teacher, stream, replay, items, gen = small_task(tiny_stream)
    stats = train.fit_task(cfg, learner, teacher, stream, replay, items, gen)
    assert len(marks) == (stats.steps if replays else 0) and stats.steps == 6


def small_task(tiny_stream):
    """A B3 smoke task 1 (teacher, replay) at width 8 on a tiny stream, as a run builds it: fit_task's inputs
    before the precision."""
    from uniform_herding.method.model import Learner
    from uniform_herding.method.train import freeze

    cfg = dataclasses.replace(resolve("B3", "smoke"), epochs=2, batch_size=8)  # 20 items: 3 steps per epoch
    stream = tiny_stream(cfg)
    torch.manual_seed(0)
    learner = Learner(cfg.width, cfg.head, cfg.cos_scale)
    learner.head.grow(cfg.classes_per_task)
    teacher = freeze(learner)
    learner.head.grow(cfg.classes_per_task)
    gen = torch.Generator().manual_seed(0)
    return cfg, learner, teacher, stream, stream.train_items(0), stream.train_items(1), gen


@pytest.mark.trains
@pytest.mark.parametrize("precision", [Precision.FP32, Precision.FP16])
def test_fit_task_returns_its_record_and_moves_no_module_between_devices(
    precision, tiny_stream, gpu_like_fp16_conv, monkeypatch
):
    """The task's record, read once at its end, and the learner trained in place: fit_task moves neither model
    to another device (nothing moves it back, as Lightning's Trainer once did at its teardown)."""
    from uniform_herding.method.train import fit_task

    cfg, learner, teacher, stream, replay, items, gen = small_task(tiny_stream)
    moves, to = [], torch.nn.Module.to
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: (moves.append((a, k)), to(self, *a, **k))[1])
    stats = fit_task(cfg, learner, teacher, stream, replay, items, gen, precision)
    assert stats.steps == 2 * -(-len(items) // 8) == 6
    assert len(stats.epoch_loss) == 2 and all(v is not None and v > 0 for v in stats.epoch_loss)
    assert stats.weights_finite and stats.divergence() is None
    assert (stats.loss_scale is not None) == (precision == "16-mixed")
    assert all(set(k) == {"memory_format"} and not a for a, k in moves), moves  # channels_last only (fp16)
    assert all(p.isfinite().all() for p in learner.parameters())


@pytest.mark.trains
@pytest.mark.parametrize("precision", [Precision.FP32, Precision.FP16])
def test_the_loop_calls_backward_then_unscale_then_the_clip_then_the_step(
    precision, tiny_stream, gpu_like_fp16_conv, monkeypatch
):
    """Each step: the backward, on the fp16 path the unscale, the gradient-norm clip of the learner's parameters at
    cfg.grad_clip, then the step of one optimiser over those parameters, whose gradients the clip bounded.
    Recorded at the calls themselves, with their arguments: where in train.py they are made is free."""
    from uniform_herding.method import train

    calls = []

    def recorded(name, original, arguments=lambda *args: ()):
        def called(*args, **kwargs):
            calls.append((name, *arguments(*args)))
            return original(*args, **kwargs)

        return called

    def clip_recorded(parameters, max_norm, *args, **kwargs):
        parameters = list(parameters)  # a generator, read once here and once by the clip
        calls.append(("clip", parameters, max_norm))
        return clip(parameters, max_norm, *args, **kwargs)

    def step_recorded(optimizer, *args, **kwargs):
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        calls.append(("step", optimizer, torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()))
        return sgd_step(optimizer, *args, **kwargs)

    clip, sgd_step = torch.nn.utils.clip_grad_norm_, torch.optim.SGD.step
    monkeypatch.setattr(torch.Tensor, "backward", recorded("backward", torch.Tensor.backward))
    unscale = recorded("unscale", torch.amp.GradScaler.unscale_, lambda scaler, optimizer: (optimizer,))
    monkeypatch.setattr(torch.amp.GradScaler, "unscale_", unscale)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_recorded)
    monkeypatch.setattr(torch.optim.SGD, "step", step_recorded)
    cfg, learner, teacher, stream, replay, items, gen = small_task(tiny_stream)
    train.fit_task(cfg, learner, teacher, stream, replay, items, gen, precision)
    one = ["backward", *(["unscale"] if precision == "16-mixed" else []), "clip", "step"]
    assert [call[0] for call in calls] == one * 6
    optimizer = next(call[1] for call in calls if call[0] == "step")
    assert {id(call[1]) for call in calls if call[0] in ("unscale", "step")} == {id(optimizer)}  # one optimiser
    assert same_tensors([p for group in optimizer.param_groups for p in group["params"]], learner.parameters())
    for name, *arguments in calls:
        if name == "clip":
            assert same_tensors(arguments[0], learner.parameters()) and arguments[1] == cfg.grad_clip
    applied = [call[2] for call in calls if call[0] == "step" and math.isfinite(call[2])]  # fp16: none on overflow
    assert applied and all(norm <= cfg.grad_clip * (1 + 1e-5) for norm in applied), applied  # the clipped ones


def same_tensors(these: Iterable[torch.Tensor], those: Iterable[torch.Tensor]) -> bool:
    """The same tensor objects, in the same order (not equal values)."""
    these, those = list(these), list(those)
    return len(these) == len(those) and all(a is b for a, b in zip(these, those, strict=True))


@pytest.mark.trains
@pytest.mark.parametrize("precision", [Precision.FP32, Precision.FP16])
def test_student_and_teacher_forward_under_the_runs_autocast(precision, tiny_stream, gpu_like_fp16_conv):
    """On the fp16 path both the student and the frozen teacher forward under fp16 autocast (their logits fp16,
    as before the loop: Lightning's training_step ran both under it); in fp32 both are fp32."""
    from uniform_herding.method.train import fit_task

    cfg, learner, teacher, stream, replay, items, gen = small_task(tiny_stream)
    dtypes = {"student": set(), "teacher": set()}
    learner.register_forward_hook(lambda m, args, out: dtypes["student"].add(out[1].dtype))
    teacher.register_forward_hook(lambda m, args, out: dtypes["teacher"].add(out[1].dtype))
    fit_task(cfg, learner, teacher, stream, replay, items, gen, precision)
    expected = {torch.float16 if precision == "16-mixed" else torch.float32}
    assert dtypes == {"student": expected, "teacher": expected}


@pytest.mark.trains
def test_a_last_step_skipped_on_an_inf_loss_is_not_divergence(tiny_stream, gpu_like_fp16_conv, monkeypatch):
    """An fp16 overflow can make a step's loss inf; the scaler skips that step. When it is the task's very
    last step, the task is healthy: the guard judges the last finite loss, and the epoch means leave it out."""
    from uniform_herding.method import train

    cfg, learner, teacher, stream, replay, items, gen = small_task(tiny_stream)
    total, calls = 2 * -(-len(items) // 8), []
    task_loss = train.task_loss

    def inf_at_the_last_step(*args):
        calls.append(1)
        loss = task_loss(*args)
        return loss * float("inf") if len(calls) == total else loss

    monkeypatch.setattr(train, "task_loss", inf_at_the_last_step)
    stats = train.fit_task(cfg, learner, teacher, stream, replay, items, gen, Precision.FP16)
    assert len(calls) == total and stats.skipped_steps >= 1
    assert stats.last_finite_loss is not None and all(v is not None for v in stats.epoch_loss)
    assert stats.divergence() is None


def test_each_loss_term_equals_the_papers_equation_in_plain_arithmetic():
    """The three loss terms on hand-made 2 x 3 logits, each written out with math.exp/log from the paper's
    equations (Sec. 3.3), no torch function in the expected values."""
    z = [[1.0, 0.5, -0.5], [0.2, -0.3, 0.8]]  # margin-free student logits, 2 images, 3 seen classes
    y = [0, 2]
    s, m, T = 30.0, 0.35, 2.0

    def log_softmax(row: list[float]) -> list[float]:
        top = max(row)
        log_sum = top + math.log(sum(math.exp(v - top) for v in row))
        return [v - log_sum for v in row]

    # CE with the cosine margin: s*m off the target logit only, then -log softmax at the target
    ce = (
        -sum(
            log_softmax([v - (s * m if j == t else 0.0) for j, v in enumerate(row)])[t]
            for row, t in zip(z, y, strict=True)
        )
        / 2
    )
    logits, target = torch.tensor(z), torch.tensor(y)
    torch_ce = F.cross_entropy(margin_logits(logits, target, s, m), target)
    assert torch_ce.item() == pytest.approx(ce, rel=1e-6)
    # KD with T^2: T^2 * sum_j p_j (log p_j - log q_j), p = softmax(teacher/T), q = softmax(student/T), old classes
    teacher = [[0.3, 1.1], [-0.4, 0.9]]
    kd = 0.0
    for student_row, teacher_row in zip(z, teacher, strict=True):
        log_q, log_p = log_softmax([v / T for v in student_row[:2]]), log_softmax([v / T for v in teacher_row])
        kd += T * T * sum(math.exp(lp) * (lp - lq) for lp, lq in zip(log_p, log_q, strict=True))
    assert kd_loss(logits[:, :2], torch.tensor(teacher), T).item() == pytest.approx(kd / 2, rel=1e-6)
    # iCaRL's BCE: targets one-hot, old columns the teacher's sigmoid; mean over images and classes
    sigmoid = lambda v: 1 / (1 + math.exp(-v))  # noqa: E731
    bce = 0.0
    for row, t, teacher_row in zip(z, y, teacher, strict=True):
        targets = [sigmoid(teacher_row[0]), sigmoid(teacher_row[1]), 1.0 if t == 2 else 0.0]
        bce -= sum(
            q * math.log(sigmoid(v)) + (1 - q) * math.log(1 - sigmoid(v)) for v, q in zip(row, targets, strict=True)
        )
    assert icarl_bce(logits, target, torch.tensor(teacher)).item() == pytest.approx(bce / 6, rel=1e-6)
