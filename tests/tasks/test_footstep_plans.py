"""humanoid-footsteps plans: every generated mode is feasible and alternates, each mode moves the way it says, stairs
and rough terrain carry the feet (z = box top, targets centred on treads), the plan-file loader (round trip,
defaults, comments, separators, each error with its line number, atomic save), padding and the world transform.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
from sim2real.tasks.humanoid_footsteps import plans as fp
from sim2real.tasks.humanoid_footsteps.plans import (
    LEFT,
    MODES,
    RIGHT,
    FootstepPlan,
    PlanFileError,
    PlanGenerator,
    PlanLimits,
    check_plan,
    format_plans,
    height_at,
    load_plans,
    parse_plans,
    plans_to_tensor,
    save_plans,
    to_world,
)

HW = 0.1     # half width of the stance [m]
S = 20       # steps per plan
M = 64       # envs per batch
CFG = fp.DEFAULT_PLAN_CFG


def _sample(mode: str, level: float, terrain: float, seed: int = 0, cfg: dict | None = None, m: int = M):
    gen = PlanGenerator(cfg or {}, HW, S)
    g = torch.Generator().manual_seed(seed)
    k = MODES.index(mode)
    return gen.sample(torch.full((m,), k), torch.full((m,), level), torch.full((m,), terrain), generator=g)


# --- every mode feasible ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_alternates_and_is_feasible(mode):
    for level in (0.0, 0.5, 1.0):
        for terrain in (0.0, 1.0):
            b = _sample(mode, level, terrain, seed=int(level * 10 + terrain))
            assert b.steps.shape == (M, S, 5) and b.steps.dtype == torch.float32
            assert b.box_centre.shape == (M, 16, 3) and b.box_half.shape == (M, 16, 3)
            assert (b.mode == MODES.index(mode)).all() and (b.stairs == (mode == "stairs")).all()
            feet = b.steps[..., 0].long()
            assert (feet[:, 1:] != feet[:, :-1]).all()
            # Step 0: the support foot at its standing place.
            side = torch.where(feet[:, 0] == LEFT, HW, -HW)
            assert torch.allclose(b.steps[:, 0, 1:], torch.stack((torch.zeros(M), side, torch.zeros(M),
                                                                   torch.zeros(M)), dim=-1))
            assert (feet[:, 0] == LEFT).any() and (feet[:, 0] == RIGHT).any()  # random start foot
            for plan in b.to_plans():
                assert check_plan(plan, PlanLimits()) == [], (mode, level, terrain, check_plan(plan, PlanLimits()))


def test_check_plan_flags_each_limit():
    def plan(*rows):
        return FootstepPlan([r[0] for r in rows], [r[1:] for r in rows])

    ok = plan((LEFT, 0, HW, 0, 0), (RIGHT, 0.3, -HW, 0, 0))
    assert check_plan(ok, PlanLimits()) == []
    # Step measured in the previous step's frame: previous yaw pi/2 turns world +x into a lateral offset.
    rotated = plan((LEFT, 0, 0, 0, math.pi / 2), (RIGHT, 0.2, 0.0, 0, math.pi / 2))  # right foot 0.2 m to its right
    assert check_plan(rotated, PlanLimits()) == []
    cases = {
        "step length": plan((LEFT, 0, HW, 0, 0), (RIGHT, 0.5, -HW, 0, 0)),
        "width": plan((LEFT, 0, HW, 0, 0), (RIGHT, 0.2, 0.05, 0, 0)),           # width 0.05 < 0.10
        "yaw change": plan((LEFT, 0, HW, 0, 0), (RIGHT, 0, -HW, 0, 0.6)),
        "height": plan((LEFT, 0, HW, 0, 0), (RIGHT, 0.2, -HW, 0.25, 0)),
        "twice": plan((LEFT, 0, HW, 0, 0), (LEFT, 0.2, HW, 0, 0)),
    }
    for what, p in cases.items():
        problems = check_plan(p, PlanLimits())
        assert len(problems) == 1 and what in problems[0], (what, problems)
    # Facing -x, 3.0 -> -3.0 rad is a 0.283 rad turn once wrapped, and the right foot lies towards +y.
    assert check_plan(plan((LEFT, 0, 0, 0, 3.0), (RIGHT, 0, 0.2, 0, -3.0)), PlanLimits()) == []
    assert "width" in check_plan(plan((LEFT, 0, 0, 0, 3.0), (RIGHT, 0, -0.2, 0, -3.0)), PlanLimits())[0]
    wide = plan((LEFT, 0, HW, 0, 0), (RIGHT, 0, -0.4, 0, 0.5))
    problems = check_plan(wide, PlanLimits())
    assert len(problems) == 2 and "width" in problems[0] and "yaw change" in problems[1]


# --- modes move the way they say -----------------------------------------------------------------------------------
def test_forward_and_backward_strides():
    lo, hi = CFG["step_length"]
    for mode, sign in (("forward", 1.0), ("backward", -1.0)):
        b0 = _sample(mode, 0.0, 0.0)
        dx = sign * b0.steps[:, 1:, 1].diff(prepend=torch.zeros(M, 1), dim=1)
        # Level 0: stride = min +-10%, the first one half.
        assert ((dx[:, 0] >= 0.45 * lo - 1e-6) & (dx[:, 0] <= 0.55 * lo + 1e-6)).all()
        assert ((dx[:, 1:] >= 0.9 * lo - 1e-6) & (dx[:, 1:] <= 1.1 * lo + 1e-6)).all()
        b1 = _sample(mode, 1.0, 0.0)
        dx1 = sign * b1.steps[:, 2:, 1].diff(dim=1)
        assert (dx1 > 0).all() and (dx1 <= hi + 1e-6).all() and dx1.mean() > 0.5 * (lo + hi) - 0.03
        assert (b1.steps[..., 4] == 0).all()


def test_lateral_moves_sideways():
    b = _sample("lateral", 1.0, 0.0)
    steps = b.steps
    assert (steps[..., 1] == 0).all() and (steps[..., 4] == 0).all()
    shift = steps[:, -2:, 2].mean(dim=1)  # stance centre at the end
    lo = CFG["lateral_step"][0]
    assert (shift.abs() >= 0.9 * lo * (S // 2 - 1) - 1e-6).all()
    assert (shift > 0).any() and (shift < 0).any()
    # The feet never come closer than standing.
    left = torch.where(steps[..., 0] == LEFT, steps[..., 2], torch.nan)
    right = torch.where(steps[..., 0] == RIGHT, steps[..., 2], torch.nan)
    width = (left[:, 1:] - right[:, :-1]).nan_to_num(0) + (left[:, :-1] - right[:, 1:]).nan_to_num(0)
    assert (width >= 2 * HW - 1e-6).all()


def test_turn_in_place():
    b = _sample("turn", 1.0, 0.0)
    yaw = b.steps[..., 4]
    total = fp.wrap_angle(yaw.diff(dim=1)).sum(dim=1)  # unwrapped total turn
    lo = CFG["turn_step"][0]
    assert (total.abs() >= 0.9 * lo * (S // 2 - 1) - 1e-5).all() and (total > 0).any() and (total < 0).any()
    assert (b.steps[..., 1:3].norm(dim=-1) <= 0.3).all()
    # Every step's foot lies on its side of the base: the lateral offset in its own yaw frame is +-(r >= HW).
    c, s = torch.cos(yaw), torch.sin(yaw)
    lateral = -s * b.steps[..., 1] + c * b.steps[..., 2]
    forward = c * b.steps[..., 1] + s * b.steps[..., 2]
    sgn = 1 - 2 * b.steps[..., 0]
    assert (sgn * lateral >= HW - 1e-5).all() and (forward.abs() < 1e-5).all()
    # The foot on the turning side leads (toes open, never crossing): the first foot to turn is L for a left turn.
    first = (yaw != 0).float().argmax(dim=1)
    first_foot = b.steps[torch.arange(M), first, 0]
    assert torch.equal(first_foot, torch.where(total > 0, float(LEFT), float(RIGHT)))
    # ... and the trailing foot then matches the leader's yaw.
    assert torch.equal(yaw[torch.arange(M), first + 1], yaw[torch.arange(M), first])


def test_curved_follows_an_arc():
    b = _sample("curved", 1.0, 0.0, cfg={"width_jitter": 0.0})
    x, y, yaw, sgn = b.steps[..., 1].double(), b.steps[..., 2].double(), b.steps[..., 4].double(), \
        1 - 2 * b.steps[..., 0].double()
    # Arc point under each foot: the foot moved back by half_width across its heading.
    px, py = x + sgn * HW * torch.sin(yaw), y - sgn * HW * torch.cos(yaw)
    assert px[:, 0].abs().max() < 1e-6 and py[:, 0].abs().max() < 1e-6
    # A circle through the origin tangent to +x has its centre at (0, c): x^2 + y^2 = 2 y c.
    c = (px[:, 1:] ** 2 + py[:, 1:] ** 2) / (2 * py[:, 1:])
    assert torch.allclose(c, c[:, :1].expand_as(c), atol=2e-3)
    r0, r1 = CFG["curve_radius"]
    assert ((c[:, 0].abs() >= r1 - 1e-3) & (c[:, 0].abs() <= r0 + 1e-3)).all()
    # Yaw along the tangent: the arc point at heading th is (sin th, 1 - cos th) * c.
    assert torch.allclose(torch.sin(yaw[:, 1:]), px[:, 1:] / c, atol=1e-3)
    assert torch.allclose(torch.cos(yaw[:, 1:]), 1 - py[:, 1:] / c, atol=1e-3)
    assert (c[:, 0] > 0).any() and (c[:, 0] < 0).any()  # both turn directions


def test_stand_keeps_the_standing_pose():
    for terrain in (0.0, 1.0):
        b = _sample("stand", 1.0, terrain)
        sgn = 1 - 2 * b.steps[..., 0]
        expect = torch.stack((torch.zeros(M, S), sgn * HW, torch.zeros(M, S), torch.zeros(M, S)), dim=-1)
        assert torch.equal(b.steps[..., 1:], expect)


# --- terrain -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("terrain", [0.0, 0.5, 1.0, 1.7])
def test_stairs_carry_the_feet(terrain):
    b = _sample("stairs", 1.0, terrain)
    n = CFG["stairs_steps"]
    t = min(terrain, 1.0)
    h = CFG["stairs_height"][0] + t * (CFG["stairs_height"][1] - CFG["stairs_height"][0])
    tread = CFG["stairs_tread"][0] + t * (CFG["stairs_tread"][1] - CFG["stairs_tread"][0])
    xy, z = b.steps[..., 1:3], b.steps[..., 3]
    assert torch.allclose(z, height_at(xy, b.box_centre, b.box_half), atol=1e-6)
    assert torch.allclose(z.amax(dim=1), torch.full((M,), n * h), atol=1e-6)
    # Up then down, back on the ground.
    peak = z.argmax(dim=1)
    d = z.diff(dim=1)
    for i in range(M):
        assert (d[i, :peak[i]] >= -1e-6).all() and (d[i, peak[i]:] <= 1e-6).all() and z[i, -1] == 0
    # Distinct tread heights k*h for k = 1..n.
    levels = torch.unique((z[z > 0] / h).round())
    assert levels.tolist() == list(range(1, n + 1))
    # Each raised target is inside one tread (box top = its z) with >= 0.08 m front and back.
    top = b.box_centre[..., 2] + b.box_half[..., 2]
    for i in range(M):
        for j in range(S):
            if z[i, j] <= 0:
                continue
            on = ((xy[i, j] - b.box_centre[i, :, :2]).abs() <= b.box_half[i, :, :2]).all(dim=-1)
            on &= (top[i] - z[i, j]).abs() < 1e-6
            assert on.sum() == 1, (i, j)
            k = int(on.nonzero())
            margin = b.box_half[i, k, 0] - (xy[i, j, 0] - b.box_centre[i, k, 0]).abs()
            assert margin >= 0.08
            assert b.box_half[i, k, 1] == pytest.approx(0.75)  # 1.5 m wide
    # Treads of the commanded depth; bottoms on the ground; unused boxes parked.
    real = b.box_centre[..., 2] > -5
    assert real.sum(dim=1).eq(2 * n - 1).all()
    depth = 2 * b.box_half[..., 0][real].reshape(M, -1)
    assert torch.allclose(depth[:, 0], torch.full((M,), tread), atol=1e-6)
    assert torch.allclose(depth[:, n - 1], torch.full((M,), 2 * tread), atol=1e-6)  # landing: 2 treads
    bottom = (b.box_centre[..., 2] - b.box_half[..., 2])[real]
    assert (bottom <= 1e-6).all()
    assert (b.box_centre[~real] == torch.tensor([0.0, 0.0, -10.0])).all()


@pytest.mark.parametrize("mode", ["forward", "backward", "lateral", "curved"])
def test_rough_slabs_under_the_feet(mode):
    for terrain in (0.5, 1.0, 2.0):
        b = _sample(mode, 1.0, terrain)
        rough_h = CFG["rough_height"][0] + min(terrain, 1.0) * (CFG["rough_height"][1] - CFG["rough_height"][0])
        xy, z = b.steps[..., 1:3], b.steps[..., 3]
        assert torch.allclose(z, height_at(xy, b.box_centre, b.box_half), atol=1e-6)
        assert (z >= 0).all() and (z <= rough_h + 1e-6).all()
        assert (z[:, 0] == 0).all() and (z > 0.2 * rough_h).float().mean() > 0.3
        tops = b.box_centre[..., 2] + b.box_half[..., 2]
        used = b.box_centre[..., 2] > -5
        assert (tops[used] <= rough_h + 1e-6).all()
        # Slabs lie along the path (a short sideways walk may stay on the flat start pad).
        assert used.any(dim=1).float().mean() >= (0.5 if mode == "lateral" else 1.0)
        assert ((b.box_half[..., :2][used] >= 0.2 - 1e-6) & (b.box_half[..., :2][used] <= 0.3 + 1e-6)).all()
    flat = _sample(mode, 1.0, 0.0)
    assert (flat.steps[..., 3] == 0).all()
    assert (flat.box_centre == torch.tensor([0.0, 0.0, -10.0])).all()
    assert (flat.box_half == 0.01).all()


def test_height_at_by_hand():
    centre = torch.tensor([[[1.0, 0.0, 0.05], [1.2, 0.0, 0.1], [0.0, 0.0, -10.0]]])
    half = torch.tensor([[[0.5, 0.5, 0.05], [0.1, 0.1, 0.1], [0.01, 0.01, 0.01]]])
    xy = torch.tensor([[[0.0, 0.0], [0.6, 0.4], [1.25, 0.05], [1.5, 0.0], [1.0, 0.6]]])
    assert torch.allclose(height_at(xy, centre, half), torch.tensor([[0.0, 0.1, 0.2, 0.1, 0.0]]))


def test_height_at_turned_boxes():
    """Boxes turned with their plan (``to_world``): the footprint turns with them. A 1.5 m wide, 0.28 m deep tread
    turned a quarter left covers (0.7, 0) from its centre but not (0, 0.7), the reverse of its unturned footprint;
    and every stairs target keeps its plan-frame ground height at any heading."""
    centre, half = torch.tensor([[[0.0, 0.0, 0.2]]]), torch.tensor([[[0.14, 0.75, 0.2]]])
    xy = torch.tensor([[[0.0, 0.7], [0.7, 0.0], [0.1, 0.0]]])
    assert torch.allclose(height_at(xy, centre, half), torch.tensor([[0.4, 0.0, 0.4]]))
    assert torch.allclose(height_at(xy, centre, half, torch.tensor([math.pi / 2])), torch.tensor([[0.0, 0.4, 0.4]]))
    b = _sample("stairs", 1.0, 1.0, m=8)
    g = torch.Generator().manual_seed(3)
    yaw = 2 * math.pi * torch.rand(8, generator=g) - math.pi
    steps_w, centre_w, _ = to_world(b.steps, b.box_centre, torch.zeros(8, 2), yaw)
    assert torch.allclose(height_at(steps_w[..., 1:3], centre_w, b.box_half, yaw), b.steps[..., 3], atol=1e-5)
    # A quarter of the way to the next target (clear of the riser edges) too: the plan-frame answer there.
    mid_p = 0.75 * b.steps[:, :-1, 1:3] + 0.25 * b.steps[:, 1:, 1:3]
    mid_w = 0.75 * steps_w[:, :-1, 1:3] + 0.25 * steps_w[:, 1:, 1:3]
    assert torch.allclose(height_at(mid_w, centre_w, b.box_half, yaw), height_at(mid_p, b.box_centre, b.box_half),
                          atol=1e-5)


def test_generator_is_reproducible_and_checks_its_settings():
    a, b = _sample("curved", 0.7, 1.0, seed=3), _sample("curved", 0.7, 1.0, seed=3)
    assert torch.equal(a.steps, b.steps) and torch.equal(a.box_centre, b.box_centre)
    assert not torch.equal(a.steps, _sample("curved", 0.7, 1.0, seed=4).steps)
    with pytest.raises(ValueError, match="unknown plan settings"):
        PlanGenerator({"step_lenght": [0.1, 0.3]}, HW, S)
    with pytest.raises(ValueError, match="num_boxes"):
        PlanGenerator({}, HW, S, num_boxes=6)
    gen = PlanGenerator({}, HW, S)
    with pytest.raises(ValueError, match="mode indices"):
        gen.sample(torch.tensor([7]), torch.zeros(1), torch.zeros(1))


def test_mixed_modes_in_one_batch():
    gen = PlanGenerator({}, HW, S)
    modes = torch.arange(len(MODES)).repeat(10)
    b = gen.sample(modes, torch.rand(len(modes), generator=torch.Generator().manual_seed(1)), torch.ones(len(modes)),
                   generator=torch.Generator().manual_seed(2))
    assert torch.equal(b.mode, modes) and torch.equal(b.stairs, modes == MODES.index("stairs"))
    assert all(check_plan(p) == [] for p in b.to_plans())
    assert (b.steps[modes == MODES.index("stand"), :, 1] == 0).all()


# --- plan files ------------------------------------------------------------------------------------------------------
TEXT = """\
# two plans
L, 0, 0.1, 0            # support foot, 4 fields: z = 0
r, 0.2, -0.1, 0.05, 0.1

L,0.4,0.1,0.1,0.2
---
R,0,-0.1,0
L,0,0.1,0.3
"""


def test_parse_plans_formats_defaults_comments_and_separators():
    plans = parse_plans(TEXT, "plans.txt")
    assert [p.name for p in plans] == ["plan 1", "plan 2"] and all(p.mode == "file" for p in plans)
    assert plans[0].feet.tolist() == [LEFT, RIGHT, LEFT] and plans[0].feet.dtype == np.int64
    np.testing.assert_array_equal(plans[0].poses, [[0, 0.1, 0, 0], [0.2, -0.1, 0.05, 0.1], [0.4, 0.1, 0.1, 0.2]])
    np.testing.assert_array_equal(plans[1].poses, [[0, -0.1, 0, 0], [0, 0.1, 0, 0.3]])
    assert plans[1].feet.tolist() == [RIGHT, LEFT]


def test_format_round_trips():
    b = _sample("curved", 0.8, 1.0)
    plans = b.to_plans()[:5] + parse_plans(TEXT)
    back = parse_plans(format_plans(plans))
    assert len(back) == len(plans)
    for p, q in zip(plans, back):
        assert np.array_equal(p.feet, q.feet) and np.array_equal(p.poses, q.poses)


@pytest.mark.parametrize("text, line, what", [
    ("L,0,0.1,0\nR,0.2,-0.1\n", 2, "got 3 fields"),
    ("L,0,0.1,0\nR,0.2,-0.1,0,0,0\n", 2, "got 6 fields"),
    ("# c\n\nL,0,0.1,0\nX,0.2,-0.1,0\n", 4, "unknown foot 'X'"),
    ("L,0,0.1,0\nR,0.2,nan,0\n", 2, "y is not finite"),
    ("L,0,0.1,0\nR,0.2,-0.1,inf,0\n", 2, "z is not finite"),
    ("L,0,0.1,0\nR,0.2,-0.1,abc\n", 2, "yaw is not a number: 'abc'"),
    ("L,0,0.1,0\nR,0.2,-0.1,\n", 2, "yaw is not a number: ''"),
    ("L,0,0.1,0\nR,0.2,-0.1,0\n\n# x\nr,0.4,-0.1,0\n", 5, "foot R twice in a row (feet must alternate)"),
    ("L,0,0.1,0\nR,0.2,-0.1,0\n---\n# one step\nL,0,0.1,0\n---\nL,0,0.1,0\nR,0,-0.1,0\n", 5, "plan 2 has only 1 step"),
    ("L,0,0.1,0\nR,0.2,-0.1,0\n---\n\nR,0,-0.1,0\n", 5, "plan 2 has only 1 step"),
    ("", 1, "no footstep plans"),
    ("# only a comment\n\n---\n", 1, "no footstep plans"),
])
def test_parse_errors_name_the_line(text, line, what):
    with pytest.raises(PlanFileError) as e:
        parse_plans(text, "plans.txt")
    assert str(e.value).startswith(f"plans.txt:{line}: ") and what in str(e.value), str(e.value)
    assert e.value.line == line and e.value.source == "plans.txt"


def test_exact_example_messages():
    with pytest.raises(PlanFileError, match=r"^plans\.txt:3: expected 'foot,x,y,z,yaw' or 'foot,x,y,yaw', got 3 "
                                            r"fields$"):
        parse_plans("L,0,0.1,0\nR,0,-0.1,0\nL,1,2\n", "plans.txt")
    with pytest.raises(PlanFileError, match=r"^plans\.txt:2: step uses foot L twice in a row \(feet must "
                                            r"alternate\)$"):
        parse_plans("L,0,0.1,0\nl,0,0.1,0\n", "plans.txt")


def test_load_and_atomic_save(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(PlanFileError, match=f"^{missing}: file not found$"):
        load_plans(missing)
    plans = parse_plans(TEXT)
    path = tmp_path / "plans.txt"
    path.write_text("old contents")
    save_plans(plans, path)
    assert os.listdir(tmp_path) == ["plans.txt"]  # no temporary file left behind
    back = load_plans(path)
    assert [p.poses.tolist() for p in back] == [p.poses.tolist() for p in plans]
    with pytest.raises(ValueError):
        save_plans([], path)
    assert os.listdir(tmp_path) == ["plans.txt"] and load_plans(path)[0].feet.tolist() == [LEFT, RIGHT, LEFT]
    bad = tmp_path / "bad.txt"
    bad.write_text("L,0,0.1,0\nQ,0,-0.1,0\n")
    with pytest.raises(PlanFileError, match=f"^{bad}:2: unknown foot"):
        load_plans(bad)


# --- padding and frames ----------------------------------------------------------------------------------------------
def test_plans_to_tensor_pads_by_stepping_in_place():
    plans = parse_plans(TEXT)
    steps, lengths = plans_to_tensor(plans, 6)
    assert steps.shape == (2, 6, 5) and steps.dtype == torch.float32 and lengths.tolist() == [3, 2]
    feet = steps[..., 0]
    assert (feet[:, 1:] != feet[:, :-1]).all()
    # Plan 1 (L R L): continues R L R on its last two poses.
    p1 = plans[0].poses
    assert torch.allclose(steps[0, :, 1:].double(), torch.tensor(np.stack([p1[0], p1[1], p1[2], p1[1], p1[2],
                                                                           p1[1]])), atol=1e-6)
    p2 = plans[1].poses
    assert torch.allclose(steps[1, :, 1:].double(), torch.tensor(np.stack([p2[0], p2[1]] * 3)), atol=1e-6)
    short, lengths = plans_to_tensor(plans, 2)
    assert lengths.tolist() == [2, 2] and torch.allclose(short[0, :, 1:].double(), torch.tensor(p1[:2]), atol=1e-6)
    gen = _sample("forward", 1.0, 0.0, m=4).to_plans()
    padded, _ = plans_to_tensor(gen, S + 6)
    for row in padded:
        plan = FootstepPlan(row[:, 0].long().numpy(), row[:, 1:].double().numpy())
        assert check_plan(plan) == []


def test_to_world_and_back():
    b = _sample("curved", 1.0, 1.0, m=8)
    g = torch.Generator().manual_seed(5)
    origin = 4 * torch.rand(8, 2, generator=g) - 2
    yaw = 2 * math.pi * torch.rand(8, generator=g) - math.pi
    steps_w, centre_w, quat = to_world(b.steps, b.box_centre, origin, yaw)
    assert torch.equal(steps_w[..., 0], b.steps[..., 0]) and torch.equal(steps_w[..., 3], b.steps[..., 3])
    assert (steps_w[..., 4] >= -math.pi).all() and (steps_w[..., 4] < math.pi).all()
    assert quat.shape == (8, 16, 4)
    assert torch.allclose(2 * torch.atan2(quat[..., 3], quat[..., 0]), yaw[:, None].expand(8, 16), atol=1e-5)
    # Inverse: rotate by -yaw about the origin after translating back.
    c, s = torch.cos(-yaw), torch.sin(-yaw)
    inv_origin = -torch.stack((c * origin[:, 0] - s * origin[:, 1], s * origin[:, 0] + c * origin[:, 1]), dim=-1)
    steps_p, centre_p, _ = to_world(steps_w, centre_w, inv_origin, -yaw)
    assert torch.allclose(steps_p[..., :4], b.steps[..., :4], atol=1e-5)
    assert torch.allclose(fp.wrap_angle(steps_p[..., 4] - b.steps[..., 4]), torch.zeros(8, S), atol=1e-5)
    assert torch.allclose(centre_p, b.box_centre, atol=1e-5)
    # By hand: (1, 0) turned a quarter left and moved to (2, 3) lies at (2, 4), heading pi/2.
    one = torch.tensor([[[0.0, 1.0, 0.0, 0.2, 0.0]]])
    w, cw, q = to_world(one, torch.tensor([[[1.0, 0.0, -10.0]]]), torch.tensor([[2.0, 3.0]]),
                        torch.tensor([math.pi / 2]))
    assert torch.allclose(w, torch.tensor([[[0.0, 2.0, 4.0, 0.2, math.pi / 2]]]), atol=1e-6)
    assert torch.allclose(cw, torch.tensor([[[2.0, 4.0, -10.0]]]), atol=1e-6)
    assert torch.allclose(q, torch.tensor([[[math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)]]]), atol=1e-6)
