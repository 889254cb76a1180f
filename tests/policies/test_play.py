"""``play`` dispatch (policies/play.py): the task's own renderer through its spec's ``play`` hook; a task declaring
none is refused in one line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import sim2real.tasks as tasks_mod
from sim2real.configs import ConfigError
from sim2real.policies.play import play
from sim2real.tasks import get_task, task_config


def test_play_calls_the_task_hook_with_its_arguments(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr("sim2real.tasks.quadrotor_hover.play.play",
                        lambda cfg, policy, output, **kw: calls.append((cfg["task"], policy, output, kw)) or output)
    cfg = task_config("quadrotor-hover")
    out = play(cfg, "POLICY", str(tmp_path / "x.gif"), duration_s=1.5, video=False, plans=None)
    assert out == tmp_path / "x.gif"
    assert calls == [("quadrotor-hover", "POLICY", tmp_path / "x.gif",
                      {"video": False, "duration_s": 1.5, "plans": None})]
    assert isinstance(calls[0][2], Path)


def test_a_task_without_a_play_renderer_is_refused_in_one_line(monkeypatch, tmp_path):
    spec = get_task("quadrotor-hover")
    monkeypatch.setitem(tasks_mod._REGISTRY, spec.name, replace(spec, play=None))
    with pytest.raises(ConfigError, match="^play: task quadrotor-hover declares no play renderer"):
        play(task_config("quadrotor-hover"), None, tmp_path / "x.gif")
    assert not any(tmp_path.iterdir())
