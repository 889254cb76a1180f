"""Tiled heightfield terrain (``sim2real.sim.terrain``): geometry against closed-form values, and MuJoCo agreement."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim2real.configs import ConfigError
from sim2real.sim.terrain import DEFAULT_TERRAIN, generate_terrain

mujoco = pytest.importorskip("mujoco")

HS = 0.1  # m
TILE = 8.0  # m
HALF = TILE / 2


def _cfg(**kw):
    return {"num_rows": 3, "num_cols": 2, "tile_size": TILE, "horizontal_scale": HS, "platform_size": 2.0, **kw}


def _sample(terrain, x, y):
    """heights[] at the sample nearest world (x, y) (row index = y, column index = x)."""
    j = round((x - terrain.origin_xy[0]) / HS)
    i = round((y - terrain.origin_xy[1]) / HS)
    return float(terrain.heights[i, j])


def test_flat_single_tile_is_zero():
    t = generate_terrain({"num_rows": 1, "num_cols": 1, "types": {"flat": 1.0}}, seed=3)
    assert t.types == ["flat"]
    assert t.heights.shape == (81, 81) and t.heights.dtype == np.float32
    assert np.all(t.heights == 0.0)
    np.testing.assert_allclose(t.tile_origins, [[[0.0, 0.0, 0.0]]])
    assert t.height_at(1.234, -3.21) == 0.0


def test_default_config_generates():
    t = generate_terrain(DEFAULT_TERRAIN, seed=0)
    n = DEFAULT_TERRAIN["num_rows"]
    assert t.heights.shape == (n * 80 + 1, DEFAULT_TERRAIN["num_cols"] * 80 + 1)
    assert t.tile_origins.shape == (n, DEFAULT_TERRAIN["num_cols"], 3)
    np.testing.assert_allclose(t.levels, np.arange(n) / (n - 1))
    assert set(t.types) <= set(DEFAULT_TERRAIN["types"])
    assert np.array_equal(t.heights, generate_terrain(DEFAULT_TERRAIN, seed=0).heights)


def test_unknown_key_and_bad_values_name_the_key():
    with pytest.raises(ConfigError, match=r"terrain\.foo: unknown key"):
        generate_terrain({"foo": 1}, seed=0)
    with pytest.raises(ConfigError, match=r"terrain\.tile_size"):
        generate_terrain({"tile_size": -1.0}, seed=0)
    with pytest.raises(ConfigError, match=r"terrain\.tile_size"):
        generate_terrain({"tile_size": 8.05}, seed=0)  # not a whole number of samples
    with pytest.raises(ConfigError, match=r"terrain\.num_rows"):
        generate_terrain({"num_rows": 2.5}, seed=0)
    with pytest.raises(ConfigError, match=r"terrain\.types\.lava"):
        generate_terrain({"types": {"lava": 1.0}}, seed=0)
    with pytest.raises(ConfigError, match=r"terrain\.max_slope"):
        generate_terrain({"max_slope": 2.0}, seed=0)


def test_column_proportions():
    t = generate_terrain(_cfg(num_rows=1, num_cols=10, types={"flat": 0.3, "slope_up": 0.7}), seed=0)
    assert t.types == ["flat"] * 3 + ["slope_up"] * 7


def test_stair_step_height_grows_with_level():
    max_step, width = 0.16, 0.3
    t = generate_terrain(_cfg(num_rows=5, types={"stairs_up": 0.5, "stairs_down": 0.5}, max_step_height=max_step,
                              step_width=width), seed=0)
    assert t.types == ["stairs_up", "stairs_down"]
    # mid-tread offsets from the tile centre: tread k (0 = outermost) spans (HALF - (k+1) w, HALF - k w]
    mids = [HALF - (k + 0.5) * width for k in range(4)]
    for r in range(5):
        level = r / 4
        assert t.levels[r] == pytest.approx(level)
        for c, sign in ((0, -1.0), (1, 1.0)):
            cx, cy = t.tile_origins[r, c, :2]
            for k, off in enumerate(mids):
                for dx, dy in ((off, 0.0), (0.0, -off), (-off, 0.3)):
                    assert _sample(t, cx + dx, cy + dy) == pytest.approx(sign * k * level * max_step, abs=1e-6)
            # the centre platform continues the last of floor((HALF - 1) / w) = 10 steps
            assert t.tile_origins[r, c, 2] == pytest.approx(sign * 10 * level * max_step, abs=1e-6)


def test_slope_gradient_is_tan_angle():
    max_slope = 0.35
    t = generate_terrain(_cfg(num_rows=3, types={"slope_up": 0.5, "slope_down": 0.5}, max_slope=max_slope), seed=0)
    for r in range(3):
        grad = math.tan(r / 2 * max_slope)
        for c, sign in ((0, 1.0), (1, -1.0)):  # up: rises outwards; down: falls outwards
            cx, cy = t.tile_origins[r, c, :2]
            for x0, y0, x1, y1 in ((cx + 1.5, cy, cx + 3.5, cy), (cx, cy - 1.5, cx, cy - 3.5),
                                   (cx - 2.0, cy + 0.5, cx - 3.0, cy + 0.5)):
                rise = _sample(t, x1, y1) - _sample(t, x0, y0)
                run = math.hypot(x1 - x0, y1 - y0)
                assert rise / run == pytest.approx(sign * grad, abs=1e-5)
            assert _sample(t, cx + HALF, cy) == pytest.approx(0.0, abs=1e-6)  # tile edge at 0
            assert t.tile_origins[r, c, 2] == pytest.approx(-sign * grad * (HALF - 1.0), abs=1e-5)


def test_rough_and_boxes_scale_with_level():
    t = generate_terrain(_cfg(num_rows=3, types={"rough": 0.5, "boxes": 0.5}, max_rough=0.05, max_box_height=0.2),
                         seed=1)
    px = 80
    for r in range(3):
        level = r / 2
        rows = slice(r * px + 1, (r + 1) * px)  # tile interior (edge samples are shared with the neighbours)
        rough = t.heights[rows, 1:px]
        boxes = t.heights[rows, px + 1:2 * px]
        assert np.abs(rough).max() <= level * 0.05 + 1e-6
        assert boxes.min() >= 0.0 and boxes.max() <= level * 0.2 + 1e-6
        if level > 0:
            assert np.abs(rough).max() > 0.5 * level * 0.05
            assert boxes.max() > 0.5 * level * 0.2
        assert t.tile_origins[r, 1, 2] == 0.0  # boxes keep a flat central platform


def test_height_at_matches_heights():
    t = generate_terrain(_cfg(num_rows=2, types={"rough": 0.5, "slope_up": 0.5}), seed=7)
    rng = np.random.default_rng(0)
    H = t.heights.astype(np.float64)
    rows, cols = H.shape
    i = rng.integers(0, rows - 1, 50)
    j = rng.integers(0, cols - 1, 50)
    x = t.origin_xy[0] + j * HS
    y = t.origin_xy[1] + i * HS
    np.testing.assert_allclose(t.height_at(x, y), H[i, j], atol=1e-9)
    # cell centres: bilinear = mean of the four corners; quarter points: weights 9/16, 3/16, 3/16, 1/16
    np.testing.assert_allclose(t.height_at(x + HS / 2, y + HS / 2),
                               (H[i, j] + H[i + 1, j] + H[i, j + 1] + H[i + 1, j + 1]) / 4, atol=1e-9)
    np.testing.assert_allclose(t.height_at(x + HS / 4, y + HS / 4),
                               (9 * H[i, j] + 3 * H[i + 1, j] + 3 * H[i, j + 1] + H[i + 1, j + 1]) / 16, atol=1e-9)
    for r in range(2):
        for c in range(2):
            ox, oy, oz = t.tile_origins[r, c]
            assert ox == pytest.approx(t.origin_xy[0] + (c + 0.5) * TILE)
            assert oy == pytest.approx(t.origin_xy[1] + (r + 0.5) * TILE)
            assert oz == pytest.approx(t.height_at(ox, oy))


def _compile(t, extra=None):
    spec = mujoco.MjSpec()
    t.add_to_spec(spec)
    if extra:
        extra(spec)
    return spec.compile()


def test_mujoco_surface_matches_heights():
    # 1 row x 2 columns (flat | slope_up): a transposed or flipped hfield would not match
    t = generate_terrain(_cfg(num_rows=1, types={"flat": 0.5, "slope_up": 0.5}, max_slope=0.3), seed=0)
    m = _compile(t)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    geomid = np.array([-1], dtype=np.int32)
    rng = np.random.default_rng(2)
    H = t.heights.astype(np.float64)
    for _ in range(40):
        i, j = rng.integers(1, H.shape[0] - 1), rng.integers(1, H.shape[1] - 1)
        x, y = t.origin_xy[0] + j * HS, t.origin_xy[1] + i * HS
        dist = mujoco.mj_ray(m, d, np.array([x, y, 5.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1, geomid)
        assert 5.0 - dist == pytest.approx(H[i, j], abs=1e-6)
        assert geomid[0] == m.geom("terrain").id


def test_ball_rests_on_stair_tread():
    max_step, radius = 0.15, 0.05
    t = generate_terrain(_cfg(num_rows=2, num_cols=1, types={"stairs_down": 1.0}, max_step_height=max_step,
                              step_width=0.31), seed=0)
    cx, cy, _ = t.tile_origins[1, 0]
    # Tread k = 3 (counted from the tile edge, 3 steps up at level 1) spans offsets (HALF - 4 w, HALF - 3 w] =
    # (2.76, 3.07] m; the ball sits over the flat cell 2.9..3.0 m, off the sample lines (a sphere landing exactly on
    # an hfield grid line can pick up a spurious edge contact).
    off, side = 2.95, 0.05
    assert HALF - 4 * 0.31 < off - HS / 2 and off + HS / 2 <= HALF - 3 * 0.31
    expected = 3 * max_step + radius  # level 1

    def ball(spec):
        body = spec.worldbody.add_body(name="ball", pos=[cx + off, cy + side, expected + 0.05])
        body.add_freejoint()
        body.add_geom(type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[radius, 0, 0], mass=1.0)

    m = _compile(t, ball)
    d = mujoco.MjData(m)
    for _ in range(int(1.0 / m.opt.timestep)):
        mujoco.mj_step(m, d)
    assert d.qpos[2] == pytest.approx(expected, abs=3e-3)
    assert np.linalg.norm(d.qvel) < 1e-2
    assert np.hypot(d.qpos[0] - cx - off, d.qpos[1] - cy - side) < 0.01  # did not roll off the tread


def test_add_to_spec_replaces_scene_floor():
    from sim2real.configs import load_robot
    from sim2real.sim.robot import resolve_mjcf

    spec = mujoco.MjSpec.from_file(str(resolve_mjcf(load_robot("go2")["mjcf"])))
    t = generate_terrain({"num_rows": 1, "num_cols": 1, "types": {"flat": 1.0}}, seed=0)
    t.add_to_spec(spec)
    m = spec.compile()
    names = {m.geom(g).name for g in range(m.ngeom)}
    assert "terrain" in names and "floor" not in names
