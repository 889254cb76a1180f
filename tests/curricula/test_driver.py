"""TaskCurriculum and build_task_curriculum: params kept per env, per-transition learning signals attributed to the
params each transition was played with, teacher choice from config, evaluation teachers, clear config errors."""

from __future__ import annotations

import pytest
import torch

from sim2real.configs import ConfigError
from sim2real.curricula.base import Curriculum, EpisodeOutcome, TaskSpace
from sim2real.curricula.driver import TaskCurriculum, build_task_curriculum
from sim2real.curricula.levels import LEVEL_SPACE, PerEnvLevelCurriculum

SPACE = TaskSpace(("a", "b"), (0.0, -1.0), (1.0, 1.0), ("m", "rad"), (2, 2))


class Scripted(Curriculum):
    """Hands out params from a queue; records what it is told."""

    name = "scripted"

    def __init__(self, values):
        super().__init__(SPACE, 3)
        self.values = list(values)
        self.signals = []
        self.updates = []

    def sample(self, env_ids):
        return torch.stack([torch.tensor(self.values.pop(0), dtype=torch.float32) for _ in env_ids])

    def update(self, env_ids, params, outcome):
        super().update(env_ids, params, outcome)
        self.updates.append((env_ids.tolist(), params.tolist(), outcome.success.tolist()))

    def learning_signal(self, params, signal):
        self.signals.append((params.clone(), signal.clone()))


def test_params_are_kept_per_env_and_given_back_with_outcomes():
    teacher = Scripted([[0.1, 0.0], [0.2, 0.5], [0.3, -0.5], [0.9, 0.9]])
    cur = TaskCurriculum(teacher, 3)
    cur.sample(torch.arange(3))
    torch.testing.assert_close(cur.params, torch.tensor([[0.1, 0.0], [0.2, 0.5], [0.3, -0.5]]))
    cur.episode_end(torch.tensor([1]), EpisodeOutcome(torch.tensor([True])))
    cur.sample(torch.tensor([1]))
    (ids, params, success), = teacher.updates
    assert ids == [1] and success == [True] and params[0] == pytest.approx([0.2, 0.5])
    torch.testing.assert_close(cur.params[1], torch.tensor([0.9, 0.9]))


def test_learning_signal_goes_to_the_params_each_transition_was_played_with():
    teacher = Scripted([[0.1, 0.0], [0.2, 0.0], [0.3, 0.0], [0.7, 0.0]])
    cur = TaskCurriculum(teacher, 3, trace_steps=4)
    cur.sample(torch.arange(3))
    for t in range(6):  # 6 steps, the trace keeps the last 4; env 2 starts a new task before step 4
        if t == 4:
            cur.sample(torch.tensor([2]))
        cur.record_step()
    signal = torch.arange(12, dtype=torch.float32).view(4, 3)  # [T, N], time first as rsl-rl stores it
    cur.learning_signal(signal)
    (params, sig), = teacher.signals
    assert params.shape == (12, 2) and sig.shape == (12,)
    played = params[:, 0].view(4, 3)
    torch.testing.assert_close(played[:, 0], torch.full((4,), 0.1))
    torch.testing.assert_close(played[:, 2], torch.tensor([0.3, 0.3, 0.7, 0.7]))  # steps 2, 3 old; 4, 5 new
    torch.testing.assert_close(sig, signal.reshape(-1))
    # A longer signal than the trace: only its last steps are attributed.
    cur.learning_signal(torch.ones(10, 3))
    assert teacher.signals[-1][1].shape == (12,)
    TaskCurriculum(teacher, 3).learning_signal(torch.ones(2, 3))  # no trace: ignored
    assert len(teacher.signals) == 2


def _build(teacher="levels", space="difficulty", eval_mode=False, **teachers):
    ccfg = {"teacher": teacher, "space": space, "teachers": {"uniform": {}, **teachers}}
    spaces = {"difficulty": LEVEL_SPACE, "wide": SPACE}
    return build_task_curriculum(ccfg, spaces, 4, "cpu", eval_mode=eval_mode,
                                 hand_written=lambda: PerEnvLevelCurriculum(4, 0.3, 0.1, 0.1,
                                                                            fixed_level=1.0 if eval_mode else None))


def test_teacher_and_space_come_from_config():
    assert _build().teacher.name == "levels"
    cur = _build("uniform", "wide")
    assert cur.teacher.name == "uniform" and cur.space == SPACE
    x = cur.sample(torch.arange(4))
    assert x.shape == (4, 2) and (x[:, 1] >= -1).all()
    # Evaluation: the hand-written rule fixed at full difficulty in its own space, uniform over any other.
    torch.testing.assert_close(_build(eval_mode=True).sample(torch.arange(2)), torch.ones(2, 1))
    assert _build("alp_gmm", "wide", eval_mode=True, alp_gmm={}).teacher.name == "uniform"


@pytest.mark.parametrize("kwargs, match", [
    ({"space": "nowhere"}, "curriculum.space=nowhere"),
    ({"teacher": "levels", "space": "wide"}, "hand-written rule"),
    ({"teacher": "stages"}, "hand-written rule is 'levels'"),
    ({"teacher": "alp_gmm", "space": "wide", "alp_gmm": {"fit_intervall": 3}}, "fit_intervall"),
])
def test_bad_choices_are_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        _build(**kwargs)


def test_fixed_tasks_replace_the_teacher():
    cur = _build("uniform", "wide")
    tasks = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    cur.set_fixed_tasks(tasks)
    torch.testing.assert_close(cur.sample(torch.arange(4)), tasks.repeat(2, 1))
    with pytest.raises(ValueError, match=r"\[P, 2\]"):
        cur.set_fixed_tasks(torch.zeros(3))


def test_the_config_file_holds_every_teacher_parameter_at_its_library_default():
    from sim2real.configs import CURRICULA_FILE, load_yaml
    from sim2real.curricula.teachers import TEACHER_DEFAULTS

    yaml_defaults = load_yaml(CURRICULA_FILE)
    assert set(yaml_defaults) == set(TEACHER_DEFAULTS)
    for name, defaults in TEACHER_DEFAULTS.items():
        assert set(yaml_defaults[name]) == set(defaults), name
        for key, value in defaults.items():
            # None = derived from fit_interval in the library; the config spells the value out.
            want = yaml_defaults[name]["fit_interval"] if value is None else value
            assert yaml_defaults[name][key] == want, f"{name}.{key}"
