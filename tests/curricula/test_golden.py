"""Golden sequences of the hand-written curricula, recorded under fixed seeds before they were ported to the
curriculum interface (:mod:`sim2real.curricula.base`), compared after: the port must not change what any task asks.

Each scenario drives one task env's own outcome and reset code (no physics steps, so the numbers come from torch's
seeded RNG only) with a scripted stream of episode outcomes, and records what the curriculum made the env do: the
levels or difficulties, and the task quantities they set (initial states, commands, obstacle densities, plans).

``SIM2REAL_RECORD_GOLDEN=1 pytest tests/curricula/test_golden.py`` rewrites the files (only when a behaviour change
is intended: say so in the commit).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from sim2real.tasks import make_env, task_config

GOLDEN = Path(__file__).parent / "golden"
RECORD = os.environ.get("SIM2REAL_RECORD_GOLDEN") == "1"
ROUNDS = 25


def _env(task: str, n: int, overrides: list[str] | None = None):
    torch.manual_seed(0)
    cfg = task_config(task, overrides or [])
    return make_env(cfg, num_envs=n)


def _state(env) -> dict:
    """The hand-written rule's state (under "teacher" since the port; "levels"/"stages" before)."""
    state = env.curriculum_state_dict()
    return next(state[k] for k in ("teacher", "levels", "stages") if k in state)


def _ids(g: torch.Generator, n: int) -> torch.Tensor:
    k = int(torch.randint(1, n + 1, (1,), generator=g))
    return torch.randperm(n, generator=g)[:k].sort().values


def _hover() -> list[torch.Tensor]:
    env = _env("quadrotor-hover", 16)
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(ROUNDS):
        ids = _ids(g, env.num_envs)
        m = len(ids)
        success = torch.rand(m, generator=g) < 0.5
        crash = torch.rand(m, generator=g) < 0.3
        pos_err = torch.rand(m, generator=g) * 0.4
        speed = torch.rand(m, generator=g)
        env._record_outcome(ids, success, crash, pos_err, speed, {"log": {}})
        env._reset_envs(ids)
        env.penalty_schedule.advance(env.num_envs * 1000)
        d = env.dyn
        out += [_state(env)["levels"].clone(), d.pos_w[ids] - env.goal_w[ids],
                d.lin_vel_w[ids], d.quat_w[ids], d.ang_vel_b[ids], torch.tensor(env.penalty_schedule.value)]
    return out


def _swarm() -> list[torch.Tensor]:
    env = _env("quadrotor-swarm", 6, ["env.drones_per_env=4", "replay.enabled=false"])
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(ROUNDS):
        rooms = _ids(g, env.num_rooms)
        ids = env.drone_ids(rooms)
        env.in_tol_steps[ids] = torch.where(torch.rand(len(ids), generator=g) < 0.6, env.success_hold_steps, 0)
        env.ep_collisions[ids] = (torch.rand(len(ids), generator=g) < 0.2).float() * 2.0
        bad = torch.rand(len(rooms), generator=g) < 0.1
        env._record_outcome(rooms, bad, torch.zeros(env.num_envs), {"log": {}})
        env._reset_rooms(rooms, allow_replay=False)
        env.penalty_schedule.advance(env.num_envs * 1000)
        out += [_state(env)["levels"].clone(), env.density[rooms].clone(),
                env.num_visible[rooms].clone(), env.occupied[rooms].clone(), env.goal_w[ids].clone(),
                env.dyn.pos_w[ids].clone(), torch.tensor(env.penalty_schedule.value)]
    return out


def _jump() -> list[torch.Tensor]:
    env = _env("quadruped-jump", 8, ["curriculum.max_difficulty=3.0", "curriculum.step_up=0.3",
                                     "env.stand_prob=0.0"])  # stand-only episodes never reach the curriculum
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(ROUNDS):
        ids = _ids(g, env.num_envs)
        success = torch.rand(len(ids), generator=g) < 0.7
        fall = ~success & (torch.rand(len(ids), generator=g) < 0.5)
        env._record_outcome(ids, env.robot_state(), success, fall, {})
        env._reset_envs(ids)
        out += [_state(env)["difficulty"].clone(), env.difficulty[ids].clone(),
                env.command[ids].clone()]
    return out


def _humanoid() -> list[torch.Tensor]:
    env = _env("humanoid-footsteps", 8, ["curriculum.step_up=0.2"])
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(ROUNDS):
        ids = _ids(g, env.num_envs)
        env.steps_done[ids] = 10.0
        env.hits[ids] = torch.where(torch.rand(len(ids), generator=g) < 0.7, 10.0, 2.0)
        fall = torch.rand(len(ids), generator=g) < 0.2
        env._record_outcome(ids, fall, {})
        env._reset_envs(ids)
        out += [_state(env)["difficulty"].clone(), env.difficulty[ids].clone(),
                env.mode[ids].clone(), env.is_stairs[ids].clone(), env.tracker.steps_w[ids].clone(),
                env.box_half[ids].clone()]
    return out


SCENARIOS = {"quadrotor-hover": _hover, "quadrotor-swarm": _swarm, "quadruped-jump": _jump,
             "humanoid-footsteps": _humanoid}


@pytest.mark.parametrize("task", sorted(SCENARIOS))
def test_hand_written_curriculum_matches_golden(task):
    got = SCENARIOS[task]()
    path = GOLDEN / f"{task}.pt"
    if RECORD:
        GOLDEN.mkdir(exist_ok=True)
        torch.save(got, path)
        pytest.skip(f"recorded {path.name}")
    want = torch.load(path)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == b.dtype and a.shape == b.shape, (
            f"item {i}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=f"{task}: item {i} differs")
    # The scenario moved the curriculum (promotions and demotions both happened): the golden can fail.
    levels = [t for t in want[::len(want) // ROUNDS]]
    assert len({round(float(t.float().mean()), 4) for t in levels}) > 3
