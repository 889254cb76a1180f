"""``sim2real bench swarm --curve``: the density curve's table, JSON rows and plot (the evaluation itself is the
held-out ``evaluate`` of every task, stubbed here with values that differ per density)."""

from __future__ import annotations

import pytest

from sim2real.bench import swarm as bench


def test_density_curve_evaluates_each_density_at_32_drones_and_writes_the_plot(monkeypatch, tmp_path, capsys):
    import sim2real.policies.evaluation as evaluation

    seen = []

    def fake_evaluate(cfg, policy, num_episodes=None, seed=None):
        density = cfg["eval"]["density"]
        seen.append((cfg["eval"]["num_drones"], density, cfg["eval"]["goal_fraction"], num_episodes))
        return {k: density + i for i, k in enumerate(bench.METRICS)}

    monkeypatch.setattr(evaluation, "evaluate", fake_evaluate)
    from sim2real.tasks import task_config

    (tmp_path / "o").mkdir()  # (bench_swarm makes it before any evaluation)
    curve, plot = bench._density_curve(task_config("quadrotor-swarm"), policy=None, rooms=16, out=tmp_path / "o")
    assert seen == [(32, d, 1.0, 16) for d in bench.CURVE_DENSITIES]
    assert [r["density"] for r in curve] == list(bench.CURVE_DENSITIES)
    assert curve[-1]["drone_success_rate"] == pytest.approx(0.8)
    assert curve[-1]["contacts_per_drone_minute"] == pytest.approx(1.8)
    data = (tmp_path / "o" / "swarm_density.png").read_bytes()
    assert plot == str(tmp_path / "o" / "swarm_density.png") and data[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "density curve, 32 drones per room, 16 rooms each" in out and "80%" in out


def test_density_curve_takes_the_tables_rows_measured_on_the_same_rooms(monkeypatch, tmp_path):
    import sim2real.policies.evaluation as evaluation
    from sim2real.tasks import task_config

    seen = []

    def fake_evaluate(cfg, policy, num_episodes=None, seed=None):
        seen.append(cfg["eval"]["density"])
        return {k: 0.5 for k in bench.METRICS}

    monkeypatch.setattr(evaluation, "evaluate", fake_evaluate)
    row = {"rooms": 16, **{k: 0.25 for k in bench.METRICS}}
    done = {0.2: row, 0.8: dict(row, rooms=2)}  # 80 %: measured on other rooms, so evaluated again
    curve, _ = bench._density_curve(task_config("quadrotor-swarm"), None, 16, tmp_path, done)
    assert seen == [0.0, 0.4, 0.6, 0.8]
    assert [r["drone_success_rate"] for r in curve] == [0.5, 0.25, 0.5, 0.5, 0.5]


def test_curve_is_refused_for_another_bench(capsys):
    from sim2real.cli import main

    assert main(["bench", "throughput", "--curve"]) == 2
    assert "--curve applies to swarm only" in capsys.readouterr().err


def test_an_out_folder_that_cannot_be_made_is_refused_before_any_evaluation(tmp_path, capsys):
    from sim2real.cli import main

    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert main(["bench", "swarm", "--quick", "--curve", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert f"--out {blocker / 'sub'}: cannot make that folder" in err and "Traceback" not in err
