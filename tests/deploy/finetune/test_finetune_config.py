"""Fine-tuning session set-up: config checks, the tasks a session accepts (their spec's finetune part), and the
gap-recovered formula."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sim2real.configs import ConfigError
from sim2real.deploy.finetune import runner as ft
from sim2real.deploy.finetune import session_learner
from sim2real.deploy.finetune.config import finetune_config, task_finetune

PRETRAINED = Path(__file__).resolve().parents[3] / "policies" / "pretrained"


def scores(metric: str, nominal: float, before: float, after: float) -> dict:
    return {"nominal": {metric: nominal}, "before": {metric: before}, "after": {metric: after}}


def test_gap_recovered_on_an_error_and_on_a_success_rate():
    # the hover's error: 0.05 m nominal, 0.25 m on the stand-in, 0.10 m after: (0.25 - 0.10) / (0.25 - 0.05)
    assert ft.gap_recovered(scores("pos_error_mean", 0.05, 0.25, 0.10), "pos_error_mean", False) == pytest.approx(0.75)
    # the jump's success: 0.96 nominal, 0.16 on the stand-in, 0.56 after: (0.56 - 0.16) / (0.96 - 0.16)
    assert ft.gap_recovered(scores("success_rate", 0.96, 0.16, 0.56), "success_rate", True) == pytest.approx(0.5)
    # worse than the base policy is negative, a stand-in without a gap is NaN
    assert ft.gap_recovered(scores("success_rate", 0.96, 0.16, 0.08), "success_rate", True) == pytest.approx(-0.1)
    assert math.isnan(ft.gap_recovered(scores("pos_error_mean", 0.2, 0.2, 0.1), "pos_error_mean", False))


def test_the_tasks_declare_their_gap_metric():
    from sim2real.tasks import tasks

    declared = {name: (spec.finetune.gap_metric, spec.finetune.higher_is_better)
                for name, spec in tasks().items() if spec.finetune is not None}
    assert declared == {"quadrotor-hover": ("pos_error_mean", False), "quadruped-jump": ("success_rate", True),
                        "humanoid-footsteps": ("success_rate", True)}
    assert task_finetune("quadruped-jump").higher_is_better
    with pytest.raises(ConfigError, match="task 'quadrotor-swarm' declares no fine-tuning gap"):
        task_finetune("quadrotor-swarm")
    with pytest.raises(ConfigError, match="unknown task 'nope'"):
        task_finetune("nope")


def test_a_session_refuses_a_policy_of_another_task(tmp_path):
    with pytest.raises(ConfigError, match="task 'quadrotor-swarm' declares no fine-tuning gap"):
        ft.open_session(tmp_path / "s", PRETRAINED / "quadrotor-swarm", resume=False)
    assert not (tmp_path / "s").exists()  # nothing written


@pytest.mark.parametrize("override, message", [
    ("learner.no_such_key=1", "no_such_key"),
    ("learner.gamma=1.0", "learner.gamma"),
    ("actor.swap_at=step", "actor.swap_at"),
    ("standin.gap=moon", "standin.gap"),
    ("learner.target_subset=9", "learner.target_subset"),
    ("learner.ent_coef=bogus", "learner.ent_coef"),
    ("learner.warmup=-5", "learner.warmup"),
    ("learner.buffer_size=0", "learner.buffer_size"),
    ("learner.tau=5", "learner.tau"),
    ("link.learner_host=a b", "link.learner_host"),
    ("link.transitions_port=99999", "link.transitions_port"),
    ("actor.heartbeat_timeout_s=-1", "actor.heartbeat_timeout_s"),
])
def test_bad_config_values_are_refused_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        finetune_config([override])


def test_a_resumed_session_keeps_its_config(tmp_path):
    ft.open_session(tmp_path / "s", PRETRAINED / "quadrotor-hover", resume=False, overrides=["seed=3"])
    with pytest.raises(ConfigError, match="keeps its config"):
        ft.open_session(tmp_path / "s", resume=True, overrides=["seed=4"])
    session, cfg = ft.open_session(tmp_path / "s", resume=True)
    assert cfg["seed"] == 3 and session.read_config()["seed"] == 3


def test_earlier_sessions_join_the_prior_data_and_mismatched_ones_are_refused(tmp_path):
    """RLPD's prior data from an earlier session: its recorded control steps become learner transitions (one per
    held residual) in the new session's prior buffer; a session of another base policy or another hold is refused
    by name."""
    from sim2real.deploy.finetune.learner import transitions_from_recording

    hover = PRETRAINED / "quadrotor-hover"
    earlier, cfg = ft.open_session(tmp_path / "earlier", hover, resume=False, overrides=["hold_steps=10"])
    run = ft.run_actor(earlier, cfg, minutes=3.0 / 60.0, learner=False, realtime=False)  # 300 control steps
    arrays = transitions_from_recording(earlier.path, 10)
    # every held residual of 10 steps, and the last shorter hold of each ended episode: about 300 / 10
    assert 30 <= len(arrays["reward"]) <= 30 + run["episodes"]
    # no control step lost or counted twice, except an unfinished hold at the end of the run (dropped: its residual
    # was not held for its full length and no episode ended it)
    assert run["steps"] - 10 < int(arrays["steps"].sum()) <= run["steps"]

    later, cfg = ft.open_session(tmp_path / "later", hover, resume=False,
                                 overrides=["hold_steps=10", f"learner.prior_sessions=[{earlier.path}]"])
    learner = session_learner.make_learner(later, cfg)
    assert learner.buffer.prior.size() == len(arrays["reward"])
    assert later.buffer_names() == ["prior"] and len(later.load_buffer("prior")["reward"]) == len(arrays["reward"])

    # refused when the session is created (its config can never change later), naming the folder
    with pytest.raises(ConfigError, match="held residuals for 10 control steps, this session for 5"):
        ft.open_session(tmp_path / "other_hold", hover, resume=False,
                        overrides=["hold_steps=5", f"learner.prior_sessions=[{earlier.path}]"])
    jump, _ = ft.open_session(tmp_path / "jump", PRETRAINED / "quadruped-jump", resume=False)
    with pytest.raises(ConfigError, match="fine-tuned another base policy"):
        ft.open_session(tmp_path / "other_base", hover, resume=False,
                        overrides=[f"learner.prior_sessions=[{jump.path}]"])
    with pytest.raises(ConfigError, match="nowhere"):
        ft.open_session(tmp_path / "nas", hover, resume=False,
                        overrides=[f"learner.prior_sessions=[{tmp_path / 'nowhere'}]"])
    assert not any((tmp_path / d).exists() for d in ("other_hold", "other_base", "nas"))  # nothing written


def test_a_gap_the_task_cannot_take_is_refused_when_the_session_is_created(tmp_path):
    with pytest.raises(ConfigError, match="domain_rand.friction' is not in the task config"):
        ft.open_session(tmp_path / "s", PRETRAINED / "quadrotor-hover", resume=False, overrides=["standin.gap=legged"])
    assert not (tmp_path / "s").exists()


def test_a_humanoid_session_runs_the_shipped_walker_on_its_own_gap_and_the_model_it_is_given(tmp_path,
                                                                                              shared_robots):
    from sim2real.deploy.recording.transitions import read_transitions

    walker = PRETRAINED / "humanoid-footsteps"
    with pytest.raises(ConfigError, match="config key 'standin.mjcf': no MJCF file at"):
        ft.open_session(tmp_path / "none", walker, resume=False, overrides=[f"standin.mjcf={tmp_path / 'no.xml'}"])
    # a file the task cannot simulate (the Go2 has no JVRC-1 feet) is refused before any session folder exists
    with pytest.raises(ConfigError, match=r"standin.mjcf=.*go2.*: the task cannot simulate it \(.*foot_bodies"):
        ft.open_session(tmp_path / "go2", walker, resume=False,
                        overrides=[f"standin.mjcf={shared_robots / 'unitree_go2' / 'scene.xml'}"])
    assert not (tmp_path / "go2").exists()
    mjcf = shared_robots / "jvrc1" / "xml" / "scene.xml"
    session, cfg = ft.open_session(tmp_path / "h", walker, resume=False,
                                   overrides=[f"standin.mjcf={mjcf}", "standin.realtime=false", "seed=1"])
    assert cfg["standin"]["mjcf"] == str(mjcf.resolve())
    _, task_cfg = ft.base_policy(session, cfg)
    shifted = ft.standin_task_config(task_cfg, cfg)
    assert shifted["robot"]["mjcf"] == str(mjcf.resolve())
    dr = shifted["domain_rand"]  # the humanoid's gap (standin.gap: default), not the Go2's
    assert dr["friction"] == [0.3, 0.3] and dr["mass_scale"] == [1.2, 1.2] and dr["latency_steps"] == [2, 2]
    run = ft.run_actor(session, cfg, minutes=0.1, learner=False)  # 240 control steps at 40 Hz
    assert run["steps"] == 240
    data = read_transitions(session.recordings_dir)
    assert data["state.v1"].shape == (240, 13 + 2 * 12)  # base pose and twist, the 12 leg joints


def test_the_session_executes_the_base_policys_own_actions_within_its_action_bounds(tmp_path, shared_robots):
    """A zero residual leaves the base action as it is: the legged robots' actions are joint offsets in units of their
    action scale, bounded at +-4, not +-1 (clipped to +-1, the shipped walker fell within 3 s in every episode of a
    session; unclipped it walks its 10 s episodes)."""
    import json

    import torch

    from sim2real.deploy.finetune.residual_sac import ResidualSpec, compose_action

    walker = PRETRAINED / "humanoid-footsteps"
    session, cfg = ft.open_session(tmp_path / "h", walker, resume=False, overrides=[
        f"standin.mjcf={shared_robots / 'jvrc1' / 'xml' / 'scene.xml'}", "standin.realtime=false", "standin.gap=none",
        "actor.explore=false", "seed=1"])
    spec = ft.residual_spec(session, cfg)
    assert spec.action_clip == (-4.0, 4.0)
    base = torch.tensor([[3.0, -2.5, 0.5]])
    assert torch.equal(compose_action(base, torch.zeros(1, 3), spec), base)
    assert spec.residual_scale == 0.4
    assert compose_action(base, torch.ones(1, 3), spec)[0].tolist() == pytest.approx([3.4, -2.1, 0.9])
    # a quadrotor's normalised actions stay in [-1, 1] (ResidualSpec's default bounds)
    quadrotor = ResidualSpec(3, 3, 0.4)
    assert compose_action(base, torch.ones(1, 3), quadrotor)[0].tolist() == pytest.approx([1.0, -1.0, 0.9])
    ft.run_actor(session, cfg, minutes=0.35, learner=False)  # 840 control steps: two 10 s episodes and a part
    episodes = [json.loads(line) for line in (session.path / "metrics.jsonl").read_text().splitlines()]
    episodes = [e for e in episodes if e.get("event") == "episode"]
    assert len(episodes) == 2 and all(e["end"] == "time_limit" and e["fall"] == 0.0 for e in episodes), episodes


def test_a_damaged_learner_checkpoint_gives_a_fresh_learner_fed_from_the_recordings(tmp_path, caplog):
    import logging

    session, cfg = ft.open_session(tmp_path / "s", PRETRAINED / "quadrotor-hover", resume=False,
                                   overrides=["hold_steps=10", "learner.warmup=10", "learner.batch_size=16",
                                              "learner.hidden=[16,16]"])
    ft.run_actor(session, cfg, minutes=3.0 / 60.0, learner="sync", realtime=False)  # checkpoints at its end
    state = session.learner_dir / session_learner.LEARNER_STATE
    good = session_learner.make_learner(session, cfg)
    assert good.updates > 0 and good.buffer.online.size() > 0
    state.write_bytes(state.read_bytes()[:100])  # truncated, as by a full disk
    (session.buffers_dir / "online.npz").write_bytes(b"garbage")
    with caplog.at_level(logging.WARNING, logger="sim2real.finetune"):
        fresh = session_learner.make_learner(session, cfg)
    assert "is damaged" in caplog.text and "rebuilt from the session's recordings" in caplog.text
    assert fresh.updates == 0
    # every complete held residual of the recording is back in the online buffer
    from sim2real.deploy.finetune.learner import transitions_from_recording

    assert fresh.buffer.online.size() == len(transitions_from_recording(session.path, 10)["reward"]) > 0


def test_finetune_eval_prints_the_columns_each_task_scores(capsys):
    """The hover's rows have a position error and a crash rate, the humanoid's a hit rate and a fall rate and no
    position error (``finetune eval`` on a humanoid session raised KeyError 'pos_error_mean' before)."""
    from sim2real.deploy.finetune.cli import print_scores

    hover = {"pos_error_mean": 0.081, "success_rate": 0.0, "crash_rate": 0.0}
    print_scores({"nominal": hover, "before": hover, "after": hover, "version": 3, "gap_metric": "pos_error_mean",
                  "recovered": 0.82})
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["policy", "pos", "error", "[m]", "success", "crash"]
    assert out[3].split()[-3:] == ["0.081", "0.000", "0.000"] and out[-1] == "gap recovered (position error): 0.82"
    walker = {"hit_rate": 0.987, "success_rate": 0.961, "fall_rate": 0.023}
    shifted = {"hit_rate": 0.912, "success_rate": 0.734, "fall_rate": 0.117}
    print_scores({"nominal": walker, "before": shifted, "after": shifted, "version": 2, "gap_metric": "success_rate",
                  "recovered": 0.0})
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["policy", "hit", "rate", "success", "falls"]
    assert out[2].split()[-3:] == ["0.912", "0.734", "0.117"] and out[-1] == "gap recovered (success rate): 0.00"
