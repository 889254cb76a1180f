"""The shared touchdown counter (tasks/humanoid_footsteps/tracker.py, used by the env and the deploy node) on
hand-made foot sequences: touchdowns need an air time, real steps a rise, only the first real step of a window
is scored, only windows of real plan steps are counted; the hits and steps below are worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sim2real.tasks.humanoid_footsteps.plans import LEFT, RIGHT
from sim2real.tasks.humanoid_footsteps.tracker import FootstepTracker, TouchdownCounter

DT, PERIOD = 0.025, 0.2  # 8 control ticks per step window
TICKS = 24               # windows of steps 1, 2 (real) and 3 (padding)
# Plan (world frame): step 0 the right foot where it stands, then left, right, left; real length 3.
# (foot, x, y, z, yaw); step 4 pads.
PLAN = [(RIGHT, 0.0, -0.1, 0.0, 0.0), (LEFT, 0.3, 0.1, 0.0, 0.0), (RIGHT, 0.6, -0.1, 0.0, 0.0),
        (LEFT, 0.9, 0.1, 0.0, 0.0), (RIGHT, 0.6, -0.1, 0.0, 0.0)]


def air(z):
    return (0.0, None, None, z, None)  # out of contact at height z, xy and yaw unchanged


def land(x, y, yaw=0.0):
    return (300.0, x, y, 0.0, yaw)


#: {(tick, foot): (force [N], x, y, z [m], yaw [rad])} per env; every other tick a foot stands where it last was,
#: 300 N, z = 0.
EVENTS = [
    {  # env 0
        # window 1 (target: left at 0.3, 0.1): a swing rising 6 cm, landing 2 cm off, 0.1 rad turned: a hit.
        (2, LEFT): air(0.02), (3, LEFT): air(0.06), (4, LEFT): air(0.04), (5, LEFT): land(0.32, 0.1, 0.1),
        # window 2 (target: right at 0.6, -0.1): a 1 cm shuffle onto the target: a touchdown, not a step: a miss.
        (10, RIGHT): air(0.01), (11, RIGHT): air(0.01), (12, RIGHT): air(0.01), (13, RIGHT): land(0.6, -0.1),
        # window 3 (step 3: padding): a hit that is not counted.
        (18, LEFT): air(0.05), (19, LEFT): air(0.05), (20, LEFT): air(0.05), (21, LEFT): land(0.9, 0.1),
    },
    {  # env 1
        # window 1: one tick in the air (chatter), then a real step 0.2 m short: a miss.
        (1, LEFT): air(0.05), (2, LEFT): land(0.3, 0.1),
        (3, LEFT): air(0.05), (4, LEFT): air(0.05), (5, LEFT): air(0.05), (6, LEFT): land(0.5, 0.1),
        # window 2: a real step on the target turned 0.3 rad (a miss), then a second, good one: not scored.
        (9, RIGHT): air(0.05), (10, RIGHT): air(0.05), (11, RIGHT): air(0.05), (12, RIGHT): land(0.6, -0.1, 0.3),
        (13, RIGHT): air(0.05), (14, RIGHT): air(0.05), (15, RIGHT): land(0.6, -0.1),
    },
]


def sequences():
    """``force [T, N, 2]``, ``pos [T, N, 2, 3]``, ``yaw [T, N, 2]`` of :data:`EVENTS` (tick t at row t - 1)."""
    n = len(EVENTS)
    force, pos, yaw = np.zeros((TICKS, n, 2)), np.zeros((TICKS, n, 2, 3)), np.zeros((TICKS, n, 2))
    for e, events in enumerate(EVENTS):
        cur = {LEFT: [0.0, 0.1, 0.0, 0.0], RIGHT: [0.0, -0.1, 0.0, 0.0]}  # x, y, z, yaw
        for t in range(1, TICKS + 1):
            for f in (LEFT, RIGHT):
                fz, x, y, z, a = events.get((t, f), (300.0, None, None, 0.0, None))
                cur[f] = [cur[f][0] if x is None else x, cur[f][1] if y is None else y, z,
                          cur[f][3] if a is None else a]
                force[t - 1, e, f] = fz
                pos[t - 1, e, f] = cur[f][:3]
                yaw[t - 1, e, f] = cur[f][3]
    f32 = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    return f32(force), f32(pos), f32(yaw)


def run():
    n = len(EVENTS)
    counter = TouchdownCounter(n, contact_force=5.0, min_swing_s=0.04, min_clearance=0.03, hit_distance=0.1,
                               hit_yaw=0.2)
    tracker = FootstepTracker(n, len(PLAN), PERIOD)
    ids = torch.arange(n)
    tracker.reset(ids, torch.tensor(PLAN).expand(n, -1, -1), torch.full((n,), 3))
    counter.reset(ids, torch.zeros(n, 2))
    force, pos, yaw = sequences()
    events, counts = {"touchdown": set(), "step": set(), "hit": set()}, {}
    for t in range(1, TICKS + 1):
        td = counter.update(force[t - 1], pos[t - 1], yaw[t - 1], tracker.target(), DT)
        for key in events:
            events[key] |= {(t, e) for e in getattr(td, key).nonzero().flatten().tolist()}
        if t == 5:
            assert float(td.score[0]) == pytest.approx(math.exp(-0.02 / 0.1) * math.exp(-0.1 / 0.2), abs=1e-5)
            torch.testing.assert_close(td.pos_w[0], torch.tensor([0.32, 0.1, 0.0]))
        ended = counter.advance(tracker, DT)
        assert bool(ended.all()) == (t % 8 == 0), t
        counts[t] = (counter.hits.tolist(), counter.steps.tolist())
    return counter, tracker, events, counts


def test_hits_and_steps_of_hand_made_foot_sequences():
    counter, tracker, events, counts = run()
    # Per window (hits, steps) of env 0 and env 1, by hand: window 1: env 0 hit, env 1 missed (0.2 m short);
    # window 2: both missed (a shuffle; a 0.3 rad turn, the later good step not scored); window 3 is padding.
    assert [counts[t] for t in (8, 16, 24)] == [([1.0, 0.0], [1.0, 1.0]), ([1.0, 0.0], [2.0, 2.0]),
                                                ([1.0, 0.0], [2.0, 2.0])]
    assert all(counts[t] == ([0.0, 0.0], [0.0, 0.0]) for t in range(1, 8))  # counted when the window closes
    # First touchdown per window (the placement reward's): the shuffle counts, the chatter does not.
    assert events["touchdown"] == {(5, 0), (13, 0), (21, 0), (6, 1), (12, 1)}
    # First real step per window (rose 3 cm, 40 ms in the air): not the shuffle, not env 1's second step.
    assert events["step"] == {(5, 0), (21, 0), (6, 1), (12, 1)}
    assert events["hit"] == {(5, 0), (21, 0)}
    assert int(tracker.index[0]) == 4 and tracker.finished().all()
    # Per-foot state at the end: both feet down, the air time of the last swing cleared.
    assert counter.in_contact.all() and (counter.air_time == 0).all() and (counter.swing_lift == 0).all()


def test_reset_counts_and_feet_per_env():
    counter, _, _, _ = run()
    counter.air_time[1, LEFT] = 0.3
    counter.in_contact[1, LEFT] = False
    counter.reset_counts(torch.tensor([0]))  # a new plan for env 0: its counts only
    assert counter.hits.tolist() == [0.0, 0.0] and counter.steps.tolist() == [0.0, 2.0]
    assert not counter.in_contact[1, LEFT] and counter.air_time[1, LEFT] == torch.tensor(0.3)
    counter.reset_feet(torch.tensor([1]), torch.tensor([[0.1, 0.2]]))  # env 1 standing again
    assert counter.in_contact[1].all() and (counter.air_time[1] == 0).all()
    torch.testing.assert_close(counter.prev_foot_z[1], torch.tensor([0.1, 0.2]))
    assert counter.steps.tolist() == [0.0, 2.0]  # counts untouched by a feet reset


def test_the_counter_takes_its_settings_from_the_task_config():
    from sim2real.tasks import task_config

    cfg = task_config("humanoid-footsteps", ["success.hit_distance=0.07", "gait.min_clearance=0.02"])
    c = TouchdownCounter.from_config(cfg, 3)
    assert (c.contact_force, c.min_swing_s, c.min_clearance, c.hit_distance, c.hit_yaw) == (
        cfg["env"]["contact_force"], cfg["gait"]["min_swing_s"], 0.02, 0.07, cfg["success"]["hit_yaw"])
    assert c.hits.shape == (3,) and c.air_time.shape == (3, 2)


def test_arrival_advance_ends_windows_on_a_held_hit_or_the_timeout_and_counts_the_nominal_gait():
    """``gait.advance: arrival`` on the same sequences, a hold of 2 ticks and a timeout of 2 periods (16 ticks): env
    0 hits step 1 at tick 5, so its window ends at tick 6 (not 8); step 2 is never hit (the shuffle) and times out
    at tick 22. Env 1 never hits: step 1 times out at tick 16. The denominator is the nominal gait's (one step per
    8 ticks, at most the 2 real steps) and hits count up to it."""
    n = len(EVENTS)
    counter = TouchdownCounter(n, contact_force=5.0, min_swing_s=0.04, min_clearance=0.03, hit_distance=0.1,
                               hit_yaw=0.2, arrival_hold_s=2 * DT)
    tracker = FootstepTracker(n, len(PLAN), PERIOD, advance="arrival", timeout_s=2 * PERIOD)
    ids = torch.arange(n)
    tracker.reset(ids, torch.tensor(PLAN).expand(n, -1, -1), torch.full((n,), 3))
    counter.reset(ids, torch.zeros(n, 2))
    force, pos, yaw = sequences()
    ended_at, counts = {0: [], 1: []}, {}
    for t in range(1, TICKS + 1):
        counter.update(force[t - 1], pos[t - 1], yaw[t - 1], tracker.target(), DT)
        ended = counter.advance(tracker, DT)
        for e in ended.nonzero().flatten().tolist():
            ended_at[e].append(t)
        counts[t] = (counter.hits.tolist(), counter.steps.tolist())
    assert ended_at == {0: [6, 22], 1: [16]}
    # the hit at tick 5 counts once the nominal gait has reached step 1 (tick 8)
    assert counts[6] == ([0.0, 0.0], [0.0, 0.0]) and counts[8] == ([1.0, 0.0], [1.0, 1.0])
    assert counts[16] == ([1.0, 0.0], [2.0, 2.0]) and counts[24] == ([1.0, 0.0], [2.0, 2.0])
    assert tracker.index.tolist() == [3, 2]
    counter.reset_counts(torch.tensor([0]))
    tracker.reset(torch.tensor([0]), torch.tensor(PLAN).unsqueeze(0), torch.tensor([3]))
    assert counter.hits.tolist() == [0.0, 0.0] and counter.steps.tolist() == [0.0, 2.0]
    assert float(tracker.t_plan[0]) == 0.0 and float(counter.since_hit[0]) == 0.0


def test_the_tracker_takes_its_advance_rule_from_the_task_config():
    from sim2real.configs import ConfigError
    from sim2real.tasks import task_config

    cfg = task_config("humanoid-footsteps", ["gait.advance=arrival", "gait.timeout_periods=3",
                                             "gait.arrival_hold_s=0.2", "gait.step_period=0.6"])
    tracker = FootstepTracker.from_config(cfg, 2, 5)
    assert tracker.advance_mode == "arrival" and tracker.timeout_s == pytest.approx(1.8)
    assert TouchdownCounter.from_config(cfg, 2).arrival_hold_s == pytest.approx(0.2)
    old = {"gait": {"step_period": 0.5}}  # a config saved before the keys existed: the timer, as trained
    assert FootstepTracker.from_config(old, 1, 5).advance_mode == "timer"
    with pytest.raises(ConfigError, match="gait.advance"):
        task_config("humanoid-footsteps", ["gait.advance=walk"])
    with pytest.raises(ConfigError, match="gait.timeout_periods"):
        task_config("humanoid-footsteps", ["gait.timeout_periods=0.5"])


def test_checkpoint_ranking_weighs_falls():
    """``score`` (what picks best.pt) is the hit rate times the share of episodes that did not fall: a policy that
    hits 0.84 of its steps but falls in half the episodes ranks below one that hits 0.8 and never falls."""
    from sim2real.tasks.humanoid_footsteps.env import HumanoidFootstepsEnv

    def outcome(hits, steps, fall):
        n = len(hits)
        return {"hits": torch.tensor(hits), "steps": torch.tensor(steps), "fall": torch.tensor(fall),
                "success": torch.zeros(n), "mode": torch.zeros(n), "difficulty": torch.zeros(n),
                "stairs": torch.zeros(n)}

    falls = HumanoidFootstepsEnv.summarize_outcomes(outcome([21.0, 21.0], [25.0, 25.0], [1.0, 0.0]))
    steady = HumanoidFootstepsEnv.summarize_outcomes(outcome([20.0, 20.0], [25.0, 25.0], [0.0, 0.0]))
    assert falls["hit_rate"] == pytest.approx(0.84) and falls["score"] == pytest.approx(0.42)
    assert steady["score"] == pytest.approx(0.8) and steady["score"] > falls["score"]
