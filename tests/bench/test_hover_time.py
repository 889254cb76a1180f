"""``sim2real bench hover-time`` mechanics (tiny budgets; the figures themselves are measured by the bench, never
here)."""

from __future__ import annotations

from sim2real.bench.hover_time import hover_time_one_seed

TINY = ["env.num_envs=64", "train.eval_episodes=16"]


def test_a_crossing_counts_once_a_fresh_held_out_evaluation_confirms_it(capsys, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the bench's scratch run folder goes
    r = hover_time_one_seed("quadrotor-hover", 2, target=0.0, budget_s=30.0, eval_every_s=0.5, confirm_episodes=24,
                            overrides=TINY)
    assert r["reached"] and r["seed"] == 2
    first = r["evaluations"][0]
    assert r["iterations"] == first["iteration"] and first["confirm_success_rate"] >= 0.0
    # The confirmation is `sim2real eval`'s set (eval.seed, its own episode count), not the selection set.
    assert r["confirm"]["seed"] == 12345 and r["confirm"]["num_episodes"] == 24
    assert r["env_steps"] == 64 * 24 * r["iterations"]
    printed = capsys.readouterr().out  # each evaluation is reported as it happens
    assert f"iteration {first['iteration']:4d}" in printed and "confirm (24 episodes, seed 12345)" in printed
    assert list(tmp_path.glob("sim2real-bench-*")) == []  # its run folder removed (other libraries leave their own)


class SteppedClock:
    """The bench module's ``time``: ``perf_counter()`` advances 0.2 s per call, so the bench's training clock (and
    the evaluations it schedules) follow the iterations, not the machine's load."""

    def __init__(self):
        self.calls = 0

    def perf_counter(self) -> float:
        self.calls += 1
        return 0.2 * (self.calls - 1)


def test_an_unreached_target_stops_at_the_budget_after_regular_evaluations(monkeypatch):
    from sim2real.bench import hover_time

    monkeypatch.setattr(hover_time, "time", SteppedClock())
    r = hover_time_one_seed("quadrotor-hover", 1, target=1.01, budget_s=1.5, eval_every_s=0.5, confirm_episodes=24,
                            overrides=TINY)
    assert not r["reached"] and r["confirm"] is None
    assert r["train_wall_s"] > 1.5
    assert len(r["evaluations"]) >= 2 and r["evaluations"][-1]["iteration"] == r["iterations"]
    assert all("confirm_success_rate" not in e for e in r["evaluations"])


def test_set_reaches_every_seed_of_the_bench(monkeypatch):
    """``sim2real bench hover-time --set K=V`` trains each seed with the override (a recipe probed through the
    bench's own evaluations and confirmation); an unknown key is refused before any training."""
    from sim2real.bench import hover_time
    from sim2real.cli import main

    seen, every = [], []

    def fake_one_seed(task, seed, target, budget_s, eval_every_s, overrides=None):
        from sim2real.tasks import task_config

        task_config(task, [*(overrides or []), f"seed={seed}"])  # what the real one resolves first
        seen.append((seed, list(overrides or [])))
        every.append(eval_every_s)
        return {"seed": seed, "reached": True, "train_wall_s": 10.0 + seed, "env_steps": 1, "iterations": 1,
                "time_sim_s": 1.0, "time_inference_s": 1.0, "time_update_s": 1.0, "time_eval_s": 0.0,
                "num_envs": 64}

    monkeypatch.setattr(hover_time, "hover_time_one_seed", fake_one_seed)
    assert main(["bench", "hover-time", "--seeds", "2", "--set", "train.num_learning_epochs=3"]) == 0
    assert seen == [(1, ["train.num_learning_epochs=3"]), (2, ["train.num_learning_epochs=3"])]
    assert main(["bench", "hover-time", "--set", "train.num_learning_epochz=3"]) == 2
    assert seen[2:] == []
    assert every == [5.0, 5.0]  # issue 20's bound by default
    assert main(["bench", "hover-time", "--seeds", "1", "--eval-every", "2.5"]) == 0
    assert every[2:] == [2.5]
    assert main(["bench", "throughput", "--eval-every", "2.5"]) == 2  # hover-time only
