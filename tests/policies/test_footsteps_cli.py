"""``sim2real eval --plans`` / ``play --plans`` for humanoid-footsteps, through the CLI: a per-plan report and JSON,
plan-file errors as one ``error:`` line with the line number, plans walked to their last step, and plots + video.
The policy is a 1-iteration checkpoint of the project's own JVRC-1-class model (these tests check the plumbing;
the learning signal is tests/tasks/test_humanoid_footsteps_learning.py)."""

from __future__ import annotations

import json

import pytest

from sim2real.cli import main

PLANS = """# forward, then stepping in place (4-field lines: z = 0)
L, 0.00,  0.096, 0.0, 0.0
R, 0.15, -0.096, 0.0, 0.0
L, 0.30,  0.096, 0.0, 0.0
---
r, 0.0, -0.096, 0.0
l, 0.0,  0.096, 0.0
R, 0.0, -0.096, 0.0
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    assert main(["train", "--task", "humanoid-footsteps", "--num-envs", "16", "--max-iterations", "1",
                 "--runs-root", str(root), "--no-progress", "--set", "train.eval_interval=0",
                 "--set", "train.num_steps_per_env=4"]) == 0
    return root


def _eval(runs, *args):
    return main(["eval", "--task", "humanoid-footsteps", "--checkpoint", "latest", "--runs-root", str(runs), *args])


def test_eval_plans_reports_every_plan_and_writes_json(runs, tmp_path, capsys):
    plans = tmp_path / "plans.txt"
    plans.write_text(PLANS)
    out = tmp_path / "m.json"
    assert _eval(runs, "--plans", str(plans), "--repeats", "2", "--output", str(out)) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["plan", "steps", "hits", "hit", "rate", "fall", "rate"]
    assert [line.split()[:2] for line in table[1:3]] == [["plan", "1"], ["plan", "2"]] and table[3].startswith("overall")
    metrics = json.loads(out.read_text())
    assert metrics["num_plans"] == 2 and metrics["repeats"] == 2 and len(metrics["plans"]) == 2
    # Each plan's steps: 2 windows per repeat at most (one per real step after the support foot), fewer on a fall.
    for row in metrics["plans"]:
        assert 0 <= row["hits"] <= row["steps"] <= 2 * 2
        assert len(row["plan_w"]) == 3
    assert metrics["steps"] == sum(r["steps"] for r in metrics["plans"])


@pytest.mark.parametrize("text, line, what", [
    ("L,0,0.1,0\nR,0.1,-0.1\n", 2, "got 3 fields"),
    ("L,0,0.1,0\nX,0.1,-0.1,0\n", 2, "unknown foot"),
    ("L,0,0.1,0\nR,nan,-0.1,0\n", 2, ""),
    ("L,0,0.1,0\nR,0.1,-0.1,0\nR,0.2,-0.1,0\n", 3, "twice"),
    ("# only a comment\n", 1, "no footstep plans"),
])
def test_a_malformed_plan_file_is_one_error_line_with_its_line_number(runs, tmp_path, capsys, text, line, what):
    plans = tmp_path / "bad.txt"
    plans.write_text(text)
    assert _eval(runs, "--plans", str(plans)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --plans: ") and f"bad.txt:{line}:" in err[0], err
    assert what in err[0]


def test_long_plans_are_walked_to_the_end_and_raised_steps_need_boxes(runs, tmp_path, capsys):
    steps = ["L,0,0.096,0,0"] + [f"{'LR'[k % 2]},{0.1 * k:.1f},{(-1) ** k * 0.096},0,0" for k in range(1, 40)]
    long_plan = tmp_path / "long.txt"
    long_plan.write_text("\n".join(steps) + "\n")
    out = tmp_path / "long.json"
    assert _eval(runs, "--plans", str(long_plan), "--output", str(out)) == 0
    # 40 steps > env.num_plan_steps (32): the tracker holds the whole plan (not cut at 32).
    assert len(json.loads(out.read_text())["plans"][0]["plan_w"]) == 40
    capsys.readouterr()
    raised = tmp_path / "raised.txt"
    raised.write_text("\n".join(["L,0,0.096,0.1,0"] + [f"{'LR'[k % 2]},{0.1 * k:.1f},{(-1) ** k * 0.096},0.1,0"
                                                       for k in range(1, 20)]) + "\n")
    assert _eval(runs, "--plans", str(raised)) == 2
    assert "20 raised footsteps" in capsys.readouterr().err and _eval(
        runs, "--plans", str(raised), "--set", "env.num_terrain_boxes=20") == 0


def test_repeats_need_plans_and_episodes_do_not_mix_with_them(runs, tmp_path, capsys):
    assert _eval(runs, "--repeats", "2") == 2
    plans = tmp_path / "plans.txt"
    plans.write_text(PLANS)
    assert _eval(runs, "--plans", str(plans), "--episodes", "4") == 2
    assert capsys.readouterr().err.count("error:") == 2


def test_play_plans_writes_plots_and_a_video(runs, tmp_path, capsys):
    from PIL import Image

    plans = tmp_path / "plans.txt"
    plans.write_text(PLANS)
    out = tmp_path / "walk.gif"
    assert main(["play", "--task", "humanoid-footsteps", "--checkpoint", "latest", "--runs-root", str(runs),
                 "--plans", str(plans), "--output", str(out), "--duration", "0.6"]) == 0
    assert (tmp_path / "walk.png").stat().st_size > 5000
    if not out.is_file():
        pytest.skip("no GL backend for MuJoCo rendering on this machine (plots only)")
    assert "walk.png" in capsys.readouterr().out
    with Image.open(out) as gif:
        assert gif.n_frames >= 10
        gif.seek(gif.n_frames // 2)
        assert len(gif.convert("RGB").getcolors(maxcolors=1 << 20)) > 50  # the robot and floor, not a blank frame


def test_a_checkpoint_saved_before_a_config_key_existed_gets_its_default(runs, tmp_path, capsys):
    """An older checkpoint's config lacks a key added since (here gait.min_clearance): the key takes its current
    default, with a note, instead of a KeyError."""
    import torch

    from sim2real.policies.checkpoints import list_checkpoints

    run = next((runs / "humanoid-footsteps").iterdir())
    data = torch.load(list_checkpoints(run)[-1], weights_only=False)
    del data["infos"]["config"]["gait"]["min_clearance"]
    old = tmp_path / "old.pt"
    torch.save(data, old)
    plans = tmp_path / "plans.txt"
    plans.write_text(PLANS)
    assert main(["eval", "--task", "humanoid-footsteps", "--checkpoint", str(old), "--plans", str(plans)]) == 0
    assert "gait.min_clearance" in capsys.readouterr().err


def test_play_plots_each_touchdown_beside_its_own_planned_step(shared_robots):
    """The plot's planned footsteps are the walked episode's (world frame, its random spawn heading), not those of
    the episode the env reset to after it: the shipped policy's hits lie within the hit distance of their targets."""
    import numpy as np

    from sim2real.policies.loading import load_policy
    from sim2real.tasks.humanoid_footsteps.play import rollout_plans
    from sim2real.tasks.humanoid_footsteps.plans import LEFT, RIGHT, FootstepPlan

    from pathlib import Path

    shipped = Path(__file__).resolve().parents[2] / "policies" / "pretrained" / "humanoid-footsteps"
    policy, cfg = load_policy(task=None, policy_dir=shipped,
                              overrides=[f"robot.mjcf={shared_robots / 'jvrc1' / 'xml' / 'scene.xml'}"])
    plan = FootstepPlan(np.array([RIGHT, LEFT, RIGHT, LEFT]),
                        np.array([[0, -0.096, 0, 0], [0.15, 0.096, 0, 0], [0.3, -0.096, 0, 0], [0.45, 0.096, 0, 0]]))
    traj = rollout_plans(cfg, policy, [plan], frames_of=None)  # to the episode's end: the env then resets
    hits = [td for td in traj["touchdowns"][0] if td[5] and td[0] < len(plan.feet)]  # (then: stepping in place)
    assert hits, traj["touchdowns"]
    for idx, x, y, _, _, _ in hits:
        assert np.hypot(*(traj["plans_w"][0][idx, 1:3] - (x, y))) < cfg["success"]["hit_distance"], (idx, x, y)
