"""A task's markers are described once, by its spec's ``markers`` hook (``tasks/<task>/markers.py``), and both the
videos (``play``, ``train --video``: the task's ``play`` rollout and ``sim/render.py``) and the browser viewer
(``view``: ``viewer/rollout.py`` and the trace of ``sim/scene.py``) draw exactly what it returns, so the two cannot
drift apart again: each consumer's markers are checked against the hook's answers for the same env states, and on
the same held-out start the video's first frame and the viewer's first frame hold the same markers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from sim2real.sim import render
from sim2real.tasks import get_task, task_config
from sim2real.tasks.spec import TaskSpec
from sim2real.viewer.rollout import record_rollout

TASKS = ("quadrotor-hover", "quadrotor-swarm", "quadruped-jump", "humanoid-footsteps")
#: Small, short settings: a room of 4 drones, short jumps.
OVERRIDES = {"quadrotor-swarm": ["eval.num_drones=4", "env.episode_length_s=1.0", "env.success_hold_s=0.5"],
             "quadruped-jump": ["sim.nthread=1", "env.jump_s=0.2", "env.wait_s=[0.1, 0.1]"],
             "humanoid-footsteps": ["sim.nthread=1"]}
#: Markers only a video draws: the swarm's trails (history, not a state of the env).
VIDEO_ONLY = ("trail/",)


#: Small batches: intra-op threads only contend (10-50x slower on a busy machine).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def hook_calls(monkeypatch):
    """Every answer of the tasks' ``markers`` hooks from now on, in call order (the hook is the spec's, wrapped)."""
    calls = []
    real = TaskSpec.markers_function

    def markers_function(self):
        hook = real(self)

        def logged(env):
            calls.append(hook(env))
            return calls[-1]

        return None if hook is None else logged

    monkeypatch.setattr(TaskSpec, "markers_function", markers_function)
    return calls


def _cfg(task: str) -> dict:
    return task_config(task, OVERRIDES.get(task, []))


def _still(cfg: dict):
    actions = 4 if cfg["robot"].get("kind") == "quadrotor" else len(cfg["robot"]["joint_names"])
    return lambda obs: torch.zeros(obs.shape[0], actions)


def _video_clips(task: str, cfg: dict) -> list[tuple[int, render.Clip]]:
    """The task's play rollout, a few control periods long: (scene index, clip) of each rendered shot."""
    policy = _still(cfg)
    if task == "quadrotor-hover":
        from sim2real.tasks.quadrotor_hover.play import rollout, video_clip

        return [(0, video_clip(rollout(cfg, policy, duration_s=0.05), cfg["robot"]))]
    if task == "quadrotor-swarm":
        from sim2real.tasks.quadrotor_swarm.play import rollout_swarm, video_clip

        return [(0, video_clip(rollout_swarm(cfg, policy, duration_s=0.06), cfg["robot"]))]
    if task == "quadruped-jump":
        from sim2real.tasks.quadruped_jump.play import rollout_jumps

        return list(enumerate(rollout_jumps(cfg, policy, num_commands=2, frames_of=[0, 1])["render"]))
    from sim2real.tasks.humanoid_footsteps.env import HumanoidFootstepsEnv
    from sim2real.tasks.humanoid_footsteps.play import default_plans, rollout_plans

    plans = default_plans(cfg, HumanoidFootstepsEnv(cfg, num_envs=1, device="cpu", eval_mode=True).half_width)
    return [(0, clip) for clip in rollout_plans(cfg, policy, plans[:1], duration_s=0.05, frames_of=0)["render"]]


def _drawn(markers) -> list:
    return [m for m in markers if not m.name.startswith(VIDEO_ONLY)]


def _frame_markers(env_trace, t: int) -> dict:
    """The viewer's markers of one env at frame ``t``: name -> (shape, size, rgba, pos, quat)."""
    out = {}
    for tr in env_trace.markers:
        if tr.visible[t]:
            assert tr.marker.name not in out, f"two tracks of {tr.marker.name} shown at frame {t}"
            m = tr.marker
            out[m.name] = (m.shape, tuple(m.size), tuple(m.rgba), tr.pos[t], tr.quat[t])
    return out


def _assert_same(viewer: dict, markers: list, where: str) -> None:
    assert sorted(viewer) == sorted(m.name for m in markers), where
    for m in markers:
        shape, size, rgba, pos, quat = viewer[m.name]
        assert (shape, size, rgba) == (m.shape, tuple(m.size), tuple(m.rgba)), f"{where}: {m.name}"
        np.testing.assert_allclose(pos, m.pos, atol=1e-6, err_msg=f"{where}: {m.name}")
        np.testing.assert_allclose(quat, m.quat, atol=1e-6, err_msg=f"{where}: {m.name}")


@pytest.mark.parametrize("task", TASKS)
def test_the_video_and_the_viewer_draw_what_the_tasks_markers_hook_returns(task, hook_calls, monkeypatch):
    cfg = _cfg(task)
    assert get_task(task).markers is not None
    # the video: every row of every shot draws the hook's answer for its scene at that control period
    clips = _video_clips(task, cfg)
    for scene, clip in clips:
        assert len(hook_calls) >= len(clip) > 1
        for t in range(len(clip)):
            assert _drawn(clip.markers(t)) == list(hook_calls[t][scene]), (task, scene, t)
    # ... and the renderer puts exactly those into the MuJoCo scene it renders
    added = []
    real_add = render.add_markers

    def add_markers(scene, markers):
        added.append(list(markers))
        real_add(scene, markers)

    monkeypatch.setattr(render, "add_markers", add_markers)
    scene, clip = clips[0]
    try:
        frames = list(render.clip_frames([replace(clip.head(2), hold_s=0.0)], (64, 36), 1))
    except RuntimeError as exc:  # no GL backend
        pytest.skip(str(exc))
    assert len(frames) == 2 and [_drawn(a) for a in added] == [list(hook_calls[t][scene]) for t in range(2)]
    # the viewer: every frame of every env shows the hook's answer at that control period
    hook_calls.clear()
    trace = record_rollout(cfg, _still(cfg), num_envs=2 if task != "quadrotor-swarm" else 1, seconds=0.06)
    assert len(hook_calls) == trace.frames > 1
    for e, env_trace in enumerate(trace.envs):
        assert env_trace.markers, (task, e)
        for t in range(trace.frames):
            _assert_same(_frame_markers(env_trace, t), hook_calls[t][e], f"{task} env {e} frame {t}")


@pytest.mark.parametrize("task", ("quadrotor-hover", "quadrotor-swarm"))
def test_the_same_held_out_start_gives_the_video_and_the_viewer_the_same_markers(task):
    """``play`` and ``view`` of one env start from the same held-out state (seeded by ``eval.seed``): the video's
    first frame and the viewer's first frame hold the same markers, named, shaped, coloured and placed alike."""
    cfg = _cfg(task)
    ((_, clip),) = _video_clips(task, cfg)
    video = _drawn(clip.markers(0))
    trace = record_rollout(cfg, _still(cfg), num_envs=1, seconds=0.02)
    assert {m.name.split("/")[0] for m in video} >= {"goal", "pole"}
    _assert_same(_frame_markers(trace.envs[0], 0), video, f"{task}: frame 0")
