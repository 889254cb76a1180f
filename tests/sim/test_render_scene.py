"""The rendered scene every task's video shares (sim/render.py): a gradient sky, a grid floor, markers in the
palette, a dressed legged model that indexes like the simulated one. Needs a GL backend (EGL or OSMesa): skipped
without one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sim2real.sim import render
from sim2real.sim.markers import Marker, yaw_quat
from sim2real.sim.render import SKY_NADIR, SKY_ZENITH, Camera, Clip, dress_spec, dressed_model

SCENE = """<mujoco><worldbody><light pos="0 0 3" dir="0 0 -1" directional="true"/>
<geom name="floor" type="plane" size="0 0 .1"/>
<body name="b" pos="0 0 .3"><freejoint/><geom type="box" size=".1 .1 .1" rgba=".8 .2 .2 1"/></body>
</worldbody></mujoco>"""


def _renderer_or_skip(model, size):
    try:
        return render.mujoco_renderer(model, size)
    except RuntimeError as exc:
        pytest.skip(str(exc))


def _frame(model, markers=(), size=(320, 180), elevation=-10.0):
    frames = list(render.clip_frames([Clip(model, 0.02, follow=np.array([[0.0, 0.0, 0.3]]),
                                           qpos=np.array([[0, 0, .3, 1, 0, 0, 0]]), markers=list(markers),
                                           camera=Camera(distance=2.0, elevation=elevation))], size, 1))
    assert len(frames) == 1 and frames[0].shape == (size[1], size[0], 3)
    return frames[0].astype(int)


def _is_sky(rgb) -> bool:
    """Between the horizon colour and the zenith colour of the gradient, per channel (blue above red)."""
    lo = 255 * np.minimum(SKY_ZENITH, SKY_NADIR) - 12
    hi = 255 * np.maximum(SKY_ZENITH, SKY_NADIR) + 12
    return bool(np.all(rgb >= lo) and np.all(rgb <= hi) and rgb[2] > rgb[0] + 20)


def test_dressed_scene_has_a_sky_a_grid_floor_and_markers():
    model = dressed_model(SCENE)
    _renderer_or_skip(model, (320, 180)).close()
    frame = _frame(model, [Marker("ball", "sphere", (0.12,), (0.1, 0.9, 0.2, 1.0), (0.0, 0.0, 0.7))])
    assert _is_sky(frame[:5].reshape(-1, 3).mean(0)), frame[:5].reshape(-1, 3).mean(0)
    floor = frame[-30:].reshape(-1, 3)
    assert len(np.unique(floor // 16, axis=0)) > 3  # a checker with lines, not one flat colour
    green = (frame[..., 1] > frame[..., 0] + 80) & (frame[..., 1] > frame[..., 2] + 80)
    assert green.sum() > 100  # the marker
    plain = mujoco_model_plain()
    bare = _frame(plain)
    assert bare[:5].mean() < 40  # without dressing: MuJoCo's black background


def mujoco_model_plain():
    mujoco = render.import_mujoco()
    return mujoco.MjModel.from_xml_string(SCENE)


def test_dress_spec_replaces_a_models_own_sky_and_floor_material():
    mujoco = render.import_mujoco()
    spec = mujoco.MjSpec.from_string(SCENE.replace("<worldbody>", """<asset>
      <texture type="skybox" builtin="gradient" rgb1="0 0 0" rgb2="0 0 0" width="8" height="48"/>
      <texture name="t" type="2d" builtin="flat" rgb1="1 0 0" width="8" height="8"/>
      <material name="red" texture="t" reflectance="0.3"/></asset><worldbody>""").replace(
        'type="plane" size="0 0 .1"', 'type="plane" size="0 0 .1" material="red"'))
    dress_spec(spec)
    model = spec.compile()
    sky = [i for i in range(model.ntex) if model.tex_type[i] == mujoco.mjtTexture.mjTEXTURE_SKYBOX]
    assert len(sky) == 1 and model.texture(sky[0]).name == "sim2real_sky"
    floor = model.geom("floor")
    assert model.material(floor.matid[0]).name == "sim2real_grid" and model.mat_reflectance[floor.matid[0]] == 0
    assert model.vis.quality.offsamples == 0 and model.vis.quality.shadowsize == 1024


def test_render_model_of_a_legged_world_indexes_like_the_simulated_one():
    from sim2real.sim.backends import make_legged_backend
    from sim2real.tasks import task_config

    cfg = task_config("quadruped-jump", ["sim.nthread=1"])
    sim = make_legged_backend(cfg["robot"], 2, cfg["sim"], obstacle=True)
    sim.set_obstacle(torch.tensor([1]), torch.tensor([[0.4, 0.0, 0.05]]), torch.tensor([[0.05, 0.5, 0.05]]))
    dressed = sim.render_model(1, dress_spec)
    g = sim.index.obstacle_geom
    assert (dressed.nq, dressed.ngeom, dressed.nbody) == (sim.model.nq, sim.model.ngeom, sim.model.nbody)
    np.testing.assert_allclose(dressed.geom_pos[g], [0.4, 0.0, 0.05])
    assert sim.render_model(0, dress_spec).geom_pos[g, 2] < -5.0  # world 0's obstacle is parked
    assert dressed.ntex == sim.model.ntex + 2  # the sky and the grid; nothing else added
    with pytest.raises(RuntimeError, match="dress may add visual assets only"):
        sim.render_model(0, lambda spec: spec.worldbody.add_geom(size=[0.1, 0, 0]))


def test_markers_become_scene_geoms_posed_as_the_viewer_poses_them():
    """A marker's shape, size (MuJoCo's geom convention, as the viewer's meshes take it; the scene's geoms hold their
    visual sizes), colour, position and orientation (its quaternion, the one the browser viewer poses its mesh with)
    become a decor geom of the video's scene; beyond the scene's capacity markers are dropped."""
    from sim2real.sim.scene import quat_to_matrix

    mujoco = render.import_mujoco()
    model = mujoco.MjModel.from_xml_string(SCENE)
    scene = mujoco.MjvScene(model, maxgeom=3)
    tilted = (0.9, 0.1, -0.3, 0.2)  # (not normalised: the geom's is)
    markers = [Marker("step", "box", (0.1, 0.05, 0.003), (1.0, 0.3, 0.25, 0.6), (1.0, 2.0, 0.003), yaw_quat(0.5)),
               Marker("disc", "cylinder", (0.2, 0.002), (0.1, 0.85, 0.25, 0.55), (0.5, 0.0, 0.003), tilted),
               Marker("goal", "sphere", (0.03,), (0.1, 0.85, 0.25, 0.55), (0.0, 0.0, 1.0)),
               Marker("dropped", "capsule", (0.1, 0.2), (1.0, 1.0, 1.0, 1.0), (0.0, 0.0, 0.0))]
    render.add_markers(scene, markers)
    assert scene.ngeom == 3
    for g, m, size in zip(scene.geoms[:3], markers, ((0.1, 0.05, 0.003), (0.2, 0.2, 0.002), (0.03, 0.03, 0.03))):
        assert g.type == getattr(mujoco.mjtGeom, f"mjGEOM_{m.shape.upper()}")
        np.testing.assert_allclose(g.size, size, rtol=1e-6)
        np.testing.assert_allclose(g.pos, m.pos, rtol=1e-6)
        np.testing.assert_allclose(g.rgba, m.rgba, atol=1e-6)
        np.testing.assert_allclose(np.reshape(g.mat, (3, 3)), quat_to_matrix(m.quat), atol=1e-6)
    c, s = np.cos(0.5), np.sin(0.5)  # a yaw turns about the world z axis
    np.testing.assert_allclose(np.reshape(scene.geoms[0].mat, (3, 3)), [[c, -s, 0], [s, c, 0], [0, 0, 1]], atol=1e-6)
