"""Improving a session's residual in the identified simulator (deploy/finetune/improve.py, ``finetune improve``):
the identified env has the identified parameters and the per-motor correction, PPO's actor exports exactly to the
edge actor's residual, the gate refuses a worse version, and end to end the sim-trained residual lowers the
held-out error on a stand-in with a known gap (the issue's hover gap: mass x1.2, thrust x0.8, 2-3 steps of latency,
motor m1 at 85 %) and the edge actor takes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import sim2real
from sim2real.deploy.finetune import runner as ft
from sim2real.deploy.finetune.improve import (
    IMPROVE_FILE, IMPROVE_STATE, ImproveError, ResidualEnv, export_residual, gate, identified_task_config,
    improved_versions,
)
from sim2real.deploy.finetune.residual_sac import ResidualActor, ResidualSpec
from sim2real.tasks import make_env

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadrotor-hover"

pytestmark = pytest.mark.skipif(not (PRETRAINED / "policy.onnx").is_file(),
                                reason=f"no pretrained hover policy shipped at {PRETRAINED}")

#: An identified robot as ``identified.json`` holds it (the issue's hover gap).
IDENTIFIED = {
    "params": {"mass_scale": 1.2, "thrust_scale": 0.8, "inertia_scale": 1.05, "motor_time_constant": 0.035,
               "latency_steps": 2, "ext_force": 0.004, "motor_thrust_scale": [0.85, 1.0, 1.0, 1.0]},
    "spread": {"thrust_scale": [0.79, 0.81], "inertia_scale": [1.0, 1.1], "motor_time_constant": [0.03, 0.04],
               "latency_steps": [2, 3]},
    "correction": {"motor_thrust_scale": [0.85, 1.0, 1.0, 1.0]},
}


@pytest.fixture(scope="module")
def hover():
    from sim2real.policies.artefact.onnx_policy import load_exported

    base, cfg = load_exported(PRETRAINED)
    meta = json.loads((PRETRAINED / "metadata.json").read_text())
    spec = ResidualSpec(obs_dim=int(meta["observation"]["dim"]), action_dim=4, residual_scale=0.4, hidden=(32, 32))
    return base, cfg, spec


def test_identified_env_has_the_identified_parameters_and_correction(hover):
    base, cfg, spec = hover
    sim = identified_task_config(cfg, IDENTIFIED, spread=True, margin=0.02)
    dr = sim["domain_rand"]
    assert dr["mass_scale"] == pytest.approx([1.2 * 0.98, 1.2 * 1.02])  # no spread identified: the value
    assert dr["thrust_scale"] == pytest.approx([0.79 * 0.98, 0.81 * 1.02])  # the per-episode range, widened
    assert dr["latency_steps"] == [2, 3] and dr["ext_force"] == 0.004 and dr["enabled"] and not dr["adr"]["enabled"]
    assert dr["motor_thrust_scale"] == [0.85, 1.0, 1.0, 1.0]
    assert cfg["domain_rand"]["motor_thrust_scale"] == [1.0] * 4  # the input is left alone

    torch.manual_seed(0)
    env = make_env(sim, num_envs=256, eval_mode=True)
    nominal, p = env.nominal, env.dyn.params
    for name, got, lo, hi in (("mass", p.mass / nominal.mass, *dr["mass_scale"]),
                              ("thrust", p.max_motor_thrust / nominal.max_motor_thrust, *dr["thrust_scale"]),
                              ("inertia", p.inertia[:, 0] / nominal.inertia[:, 0], *dr["inertia_scale"]),
                              ("tau", p.motor_time_constant, *dr["motor_time_constant"])):
        assert float(got.min()) >= lo - 1e-6 and float(got.max()) <= hi + 1e-6, name
        assert float(got.max() - got.min()) > 0.5 * (hi - lo), name  # randomised around the value, not pinned
    assert set(env.latency.tolist()) == {2, 3}
    # the correction in the action path: each rotor gives its share of the commanded thrust
    full = env.action_term.apply(torch.ones(256, 4), env.dyn)
    torch.testing.assert_close(full, p.max_motor_thrust.unsqueeze(-1) * torch.tensor([0.85, 1.0, 1.0, 1.0]))
    # pinned without spread or margin; the default config keeps every rotor at its command
    pinned = identified_task_config(cfg, IDENTIFIED, spread=False, margin=0.0)["domain_rand"]
    assert pinned["thrust_scale"] == [0.8, 0.8] and pinned["latency_steps"] == [2, 2]
    assert make_env(cfg, num_envs=2, eval_mode=True).action_term.motor_gain is None


def test_identified_config_refuses_unknown_kinds_and_incomplete_models(hover):
    base, cfg, spec = hover
    with pytest.raises(ImproveError, match="quadrotor or a legged robot, not 'wheeled'"):
        identified_task_config({**cfg, "robot": {"kind": "wheeled"}}, IDENTIFIED)
    with pytest.raises(ImproveError, match="identify again"):
        identified_task_config(cfg, {"params": {"mass_scale": 1.2}})
    with pytest.raises(ImproveError, match="margin"):
        identified_task_config(cfg, IDENTIFIED, margin=1.0)


#: A legged robot as ``identified.json`` holds it (the jump's compliant-floor gap: friction 0.25, strength x0.8,
#: floor time constant 0.05 s, 2-3 steps of latency).
IDENTIFIED_LEGGED = {"params": {"friction": 0.25, "motor_strength": 0.8, "floor_timeconst": 0.05,
                                "latency_steps": 3},
                     "spread": {"latency_steps": [2, 3]}, "correction": {}}


def test_legged_identified_env_simulates_the_identified_floor_strength_and_latency():
    """A legged robot's identified model becomes the jump task's DR keys (friction, strength, floor time constant
    widened by the margin, the per-episode latency range); what a robot varies every episode keeps its training
    range; the env built from it draws its robots inside those ranges and sets the floor's solref per world."""
    from sim2real.configs import resolve_task_config

    cfg = resolve_task_config(Path(sim2real.__file__).parent / "tasks" / "quadruped_jump" / "config.yaml")
    sim = identified_task_config(cfg, IDENTIFIED_LEGGED, spread=True, margin=0.1)
    dr = sim["domain_rand"]
    assert dr["friction"] == pytest.approx([0.225, 0.275]) and dr["motor_strength"] == pytest.approx([0.72, 0.88])
    assert dr["floor_timeconst"] == pytest.approx([0.045, 0.055]) and dr["latency_steps"] == [2, 3]
    assert dr["enabled"] and "ext_force" not in dr and "motor_thrust_scale" not in dr
    for key in ("mass_scale", "base_added_mass", "kp_scale", "kd_scale", "push_prob"):
        assert dr[key] == cfg["domain_rand"][key], key
    assert cfg["domain_rand"]["floor_timeconst"] == [0.0, 0.0]  # the input is left alone
    pinned = identified_task_config(cfg, IDENTIFIED_LEGGED, spread=False, margin=0.0)["domain_rand"]
    assert pinned["friction"] == [0.25, 0.25] and pinned["latency_steps"] == [3, 3]

    torch.manual_seed(0)
    env = make_env(sim, num_envs=64, eval_mode=True)
    p = env.dr.params
    for key in ("friction", "motor_strength"):
        lo, hi = dr[key]
        assert float(p[key].min()) >= lo - 1e-6 and float(p[key].max()) <= hi + 1e-6, key
        assert float(p[key].max() - p[key].min()) > 0.5 * (hi - lo), key  # randomised around the value
    tc = env.dr.floor_timeconst
    assert float(tc.min()) >= 0.045 - 1e-6 and float(tc.max()) <= 0.055 + 1e-6
    assert set(env.dr.latency.tolist()) == {2, 3}


def test_ppo_actor_exports_to_the_edge_actors_residual(hover):
    """PPO's Gaussian mean squashed by tanh (what ResidualEnv executes) equals the exported ResidualActor's
    deterministic residual, the input normaliser folded in."""
    from rsl_rl.models import MLPModel
    from tensordict import TensorDict

    base, cfg, spec = hover
    torch.manual_seed(1)
    obs = TensorDict({"policy": torch.randn(64, spec.input_dim) * 3 + 1}, batch_size=[64])
    model = MLPModel(obs, {"actor": ["policy"]}, "actor", spec.action_dim, hidden_dims=list(spec.hidden),
                     activation="relu", obs_normalization=True,
                     distribution_cfg={"class_name": "GaussianDistribution", "init_std": 0.3})
    model.train()
    model.update_normalization(obs)
    for m in model.mlp.modules():  # a trained-looking actor (rsl-rl starts the last layer small)
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.normal_(m.weight, std=0.3)
    actor = ResidualActor(spec)
    actor.load_state_dict(export_residual(model, spec))
    with torch.no_grad():
        want = torch.tanh(model(obs))
    torch.testing.assert_close(actor(obs["policy"]), want, atol=1e-5, rtol=1e-5)
    assert torch.allclose(actor.log_std.bias.exp(), torch.full((4,), 0.3))
    with pytest.raises(ValueError, match="layers"):
        export_residual(model, ResidualSpec(spec.obs_dim, 4, 0.4, hidden=(64, 64)))


def test_residual_env_composes_and_holds_like_the_actor(hover):
    base, cfg, spec = hover
    torch.manual_seed(0)
    env = ResidualEnv(make_env(cfg, num_envs=8, eval_mode=True), base, spec, hold=1)
    obs = env.get_observations()
    critic = env.env.get_observations()["critic"]
    assert obs["policy"].shape == (8, spec.input_dim) and obs["critic"].shape == (8, critic.shape[-1] + 4)
    torch.testing.assert_close(obs["policy"][:, -4:], base(obs["policy"][:, :-4]))
    u = torch.linspace(-2.0, 2.0, 32).reshape(8, 4)
    env.step(u)  # executed: clip(a_base(o) + scale * tanh(u), -1, 1), as compose_action on the robot
    want = (obs["policy"][:, -4:] + spec.residual_scale * torch.tanh(u)).clamp(-1.0, 1.0)
    torch.testing.assert_close(env.env.actions, want)
    held = ResidualEnv(make_env(cfg, num_envs=8, eval_mode=True), base, spec, hold=5)
    _, reward, done, extras = held.step(u)
    assert held.control_steps == 40 and int(held.env.episode_length_buf.max()) == 5  # one PPO step = one hold
    assert reward.shape == (8,) and extras["time_outs"].shape == (8,)


def test_gate_refuses_a_worse_version(hover):
    base, cfg, spec = hover
    sim = identified_task_config(cfg, IDENTIFIED)
    bad = ResidualActor(spec).zero_().state_dict()
    bad["mu.bias"] = torch.tensor([-3.0, 3.0, -3.0, 3.0])  # a deliberately bad residual: a hard constant roll/pitch
    verdict = gate(sim, base, spec, 10, bad, None, metric="pos_error_mean", episodes=32, seed=12345)
    assert not verdict["push"] and verdict["candidate"] > verdict["running"], verdict["reason"]
    # the running version itself is not better than itself: never pushed
    same = gate(sim, base, spec, 10, None, None, metric="pos_error_mean", episodes=32, seed=12345)
    assert not same["push"] and same["candidate"] == same["running"]
    # higher-is-better metrics turn the comparison round (the jump's success rate)
    worse = gate(sim, base, spec, 10, bad, None, metric="success_rate", higher_is_better=True, episodes=32,
                 seed=12345)
    assert worse["candidate"] <= worse["running"] and not worse["push"]


@pytest.mark.slow
def test_improve_lowers_the_standin_gap_and_the_actor_takes_it(tmp_path, capsys):
    """End to end (~40 s): 18 s recorded on the stand-in with the issue's hover gap, ``finetune improve``
    (identify, PPO on 512 identified robots for 20 iterations, gate, publish), scored on the stand-in's held-out set;
    then the edge actor of the resumed session takes the gated version. Measured: 0.449 -> 0.121 m (nominal
    0.010): 0.75 of the gap recovered."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # deterministic for the seed
    try:
        _improve_end_to_end(tmp_path, capsys)
    finally:
        torch.set_num_threads(threads)


def _improve_end_to_end(tmp_path, capsys):
    from sim2real.cli import main

    session, cfg = ft.open_session(tmp_path / "s", PRETRAINED, resume=False,
                                   overrides=["standin.gap=quadrotor_weak_motor", "standin.realtime=false",
                                              "eval.episodes=128", "seed=3"])
    ft.run_actor(session, cfg, minutes=0.3, learner=False)
    code = main(["finetune", "improve", "--session", str(session.path), "--iterations", "20", "--envs", "512"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (Path(session.path) / "identified.json").is_file()  # identified first: it was missing
    record = json.loads((Path(session.path) / IMPROVE_FILE).read_text().splitlines()[-1])
    assert record["version"] == 1 and "published version 1" in out, out
    assert "identified: ext_force" in out and "mass_scale 1." in out, out  # the identified values, sorted
    assert improved_versions(session) == [1]
    scores = ft.score_session(session, cfg, version=1)
    before, after = scores["before"]["pos_error_mean"], scores["after"]["pos_error_mean"]
    assert scores["recovered"] > 0.5, (before, after, scores["nominal"]["pos_error_mean"])
    # PPO's state behind version 1 is kept: the next improve continues from it while version 1 is the one to beat
    saved = torch.load(Path(session.learner_dir) / IMPROVE_STATE, weights_only=True)
    assert saved["version"] == 1 and "actor_state_dict" in saved["ppo"]
    # a second, barely trained candidate (from the zero residual) must beat version 1, which the actor takes at its
    # next start, not the base policy
    (Path(session.learner_dir) / IMPROVE_STATE).unlink()
    code = main(["finetune", "improve", "--session", str(session.path), "--iterations", "1", "--envs", "64"])
    out, err = capsys.readouterr()
    record = json.loads((Path(session.path) / IMPROVE_FILE).read_text().splitlines()[-1])
    assert code == 0 and record["running_version"] == 1 and record["version"] is None, out
    assert not record["resumed"]
    assert "not published" in out and improved_versions(session) == [1]
    # the actor of the resumed session starts on the gated version (and records its decision)
    session, cfg = ft.open_session(tmp_path / "s", None, resume=True)
    ft.run_actor(session, cfg, minutes=0.01, learner=False)
    assert session.current_actor_version() == 1
