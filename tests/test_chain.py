"""The Slurm chain (chain.py, uh run --procedure) without Slurm: --cancel and what uh status says of a chain's state
(tests/test_launch.py: where its options go). tests/test_slurm.py runs chains on a real Slurm."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from click.testing import CliRunner
from conftest import fake_slurm_clients

from uniform_herding.chain import Chain, Controller
from uniform_herding.cli import main
from uniform_herding.runs.pair import RunOptions
from uniform_herding.runs.results import write_json_atomic
from uniform_herding.verdict.judge import Verdict
from uniform_herding.verdict.words import VerdictKind


def test_cancel_without_a_chain_changes_nothing(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main, ["run", "all", "--executor", "slurm", "--procedure", "--cancel", "--results-dir", str(tmp_path)]
    )
    assert res.exit_code == 0 and res.output == f"No active chain in {tmp_path}; nothing to cancel.\n"
    assert not (tmp_path / "chain.json").exists()


def chain(results: Path, ended: dict | None) -> None:
    write_json_atomic(
        results / "chain.json",
        {
            "id": "20261127-120000",
            "started": 0.0,
            "profile": "smoke",
            "ended": ended,
            "steps": [
                {
                    "step": {"run_ids": ["B0"], "seeds": [1993]},
                    "by": "the command",
                    "array": "4",
                    "controller": "5",
                    "rescue": "6",
                }
            ],
        },
    )


def test_status_says_where_the_chain_stands_ended_or_stalled(tmp_path: Path, monkeypatch) -> None:
    """An ended chain says why; one not ended whose jobs are all gone from Slurm's queue (here: a squeue that answers
    with none) is stalled, and the line says how to go on; where squeue gives no answer, the line says that whether
    its jobs are queued is unknown, never that it stalled."""
    fake_slurm_clients(tmp_path / "bin", monkeypatch, "exit 0")
    results = tmp_path / "results"
    chain(results, {"at": 1.0, "reason": "a run of step 1 did not finish: B0 seed 1993: failed"})
    res = CliRunner().invoke(main, ["status", "--wide", "--results-dir", str(results)])
    assert "chain 20261127-120000: ended: a run of step 1 did not finish: B0 seed 1993: failed" in res.output
    chain(results, None)
    res = CliRunner().invoke(main, ["status", "--wide", "--results-dir", str(results)])
    assert (
        f"chain 20261127-120000: stalled at step 1: its jobs ended without a verdict (log: {results}/submitit/"
        "slurm/6_0_log.out); the same command resumes from the results"
    ) in res.output.splitlines()
    fake_slurm_clients(tmp_path / "bin", monkeypatch, "exit 1")
    res = CliRunner().invoke(main, ["status", "--wide", "--results-dir", str(results)])
    assert (
        "chain 20261127-120000: step 1 (B0 on seeds 1993, asked by the command): Slurm's queue could not be read "
        "(squeue failed or gave no answer in time), so whether its jobs are queued is unknown"
    ) in res.output.splitlines()


def checked(kind: VerdictKind, step: dict) -> SimpleNamespace:
    """What verdict/judge.checked_now gives the controller: the set (its procedure's four looks) and the check."""
    verdict = Verdict(kind, ("why",), step)
    return SimpleNamespace(verdict=verdict, state=SimpleNamespace(next_step={}))


def test_the_controller_submits_each_look_once_and_never_loops(tmp_path: Path, monkeypatch) -> None:
    """Issue 48 on the paper's procedure, Slurm and the check stubbed: UNDECIDED after look 1 submits look 2's runs as
    step 2 (recorded in chain.json first); the same controller started again (a requeue, its rescue) submits nothing
    more; a check that asks for a step that ran before ends the chain; a decided verdict reports and ends it."""
    expected = SimpleNamespace(procedure=SimpleNamespace(looks=(3, 6, 10, 20)))
    look2 = {"run_ids": ["B1", "B3"], "seeds": [1, 2, 3]}
    answers = [checked(VerdictKind.UNDECIDED, look2)]
    monkeypatch.setattr("uniform_herding.verdict.judge.checked_now", lambda results_dir: (expected, answers[0]))
    submitted: list[int] = []

    def submit_step(self, index: int, started: float) -> dict:
        state = json.loads((tmp_path / "chain.json").read_text())
        submitted.append(index)
        record = {**state["steps"][index], "array": f"{index}0", "controller": f"{index}1", "rescue": f"{index}2"}
        state["steps"][index] = record
        write_json_atomic(tmp_path / "chain.json", state)
        return record

    monkeypatch.setattr(Chain, "submit_step", submit_step)
    monkeypatch.setattr(Controller, "unfinished", lambda self, step: "")
    monkeypatch.setattr("uniform_herding.chain.subprocess.run", lambda *a, **k: None)  # scancel of the rescue
    reported: list[str] = []
    monkeypatch.setattr(Controller, "report", lambda self, verdict, code: reported.append(verdict) or "reported")
    chain(tmp_path, None)
    the_chain = Chain("20261127-120000", tmp_path, RunOptions("paper", tmp_path, tmp_path), {})

    Controller(the_chain, 0)()
    steps = json.loads((tmp_path / "chain.json").read_text())["steps"]
    assert [s["step"] for s in steps] == [{"run_ids": ["B0"], "seeds": [1993]}, look2] and submitted == [1]
    assert steps[1]["by"] == "step 1's check: UNDECIDED"
    Controller(the_chain, 0, rescue=True)()  # started again: step 2's jobs are all recorded, nothing new
    assert len(json.loads((tmp_path / "chain.json").read_text())["steps"]) == 2 and submitted == [1, 1]

    Controller(the_chain, 1)()  # look 2's runs moved nothing: the check asks for them again
    ended = json.loads((tmp_path / "chain.json").read_text())["ended"]
    assert ended["reason"] == (
        "the check asks again for B1, B3 on seeds 1, 2, 3, which step 2 ran; the verdict did not move: UNDECIDED (why)"
    )
    assert submitted == [1, 1] and reported == []

    chain(tmp_path, None)
    answers[0] = checked(VerdictKind.RESULTS_REPLICATED, {})
    assert Controller(the_chain, 0)() == "reported" and reported == ["RESULTS REPLICATED"]
