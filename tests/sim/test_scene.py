"""Scene geometry for the viewer (sim/scene.py): primitives, meshes and height fields where MuJoCo puts them, body
poses by forward kinematics, and traces with frozen envs and markers."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from sim2real.sim.scene import (
    Marker, TraceRecorder, body_poses, model_geoms, primitive_mesh, quadrotor_model, quat_to_matrix, transform_points,
)


def _world_vertices(model, geom, xpos, xquat):
    """A GeomMesh's vertices in the world: geom frame -> body frame -> world."""
    return transform_points(transform_points(geom.vertices, geom.pos, geom.quat), xpos[geom.body], xquat[geom.body])


def test_a_box_lands_where_its_pose_puts_it():
    v, f = primitive_mesh("box", (0.1, 0.2, 0.3))
    assert v.shape == (8, 3) and f.shape == (12, 3) and f.max() == 7
    assert np.allclose(np.sort(np.abs(v), axis=0), [[0.1, 0.2, 0.3]] * 8)
    # 90 degrees about z, then up 1 m: local +x half-extent 0.1 points along world +y
    quat = (np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4))
    world = transform_points(v, (0.0, 0.0, 1.0), quat)
    assert np.allclose(world.min(0), [-0.2, -0.1, 0.7], atol=1e-6)
    assert np.allclose(world.max(0), [0.2, 0.1, 1.3], atol=1e-6)


@pytest.mark.parametrize("shape, size, lo, hi", [
    ("sphere", (0.1,), (-0.1, -0.1, -0.1), (0.1, 0.1, 0.1)),
    ("capsule", (0.1, 0.2), (-0.1, -0.1, -0.3), (0.1, 0.1, 0.3)),
    ("cylinder", (0.1, 0.2), (-0.1, -0.1, -0.2), (0.1, 0.1, 0.2)),
    ("ellipsoid", (0.1, 0.2, 0.3), (-0.1, -0.2, -0.3), (0.1, 0.2, 0.3)),
    ("plane", (0.0, 0.0, 0.1), (-8.0, -8.0, 0.0), (8.0, 8.0, 0.0)),
])
def test_primitives_have_mujocos_extents(shape, size, lo, hi):
    v, _ = primitive_mesh(shape, size)
    assert np.allclose(v.min(0), lo, atol=2e-3) and np.allclose(v.max(0), hi, atol=2e-3)


def test_bad_primitives_are_refused():
    with pytest.raises(ValueError, match="not a primitive"):
        primitive_mesh("torus", (1.0,))
    with pytest.raises(ValueError, match="must be > 0"):
        primitive_mesh("box", (0.1, 0.0, 0.1))


def test_every_geom_of_the_go2_is_posed_like_mujoco_poses_it():
    """Each drawn geom, moved by body_poses' xpos/xquat and its own pos/quat in the body, lands exactly where
    MuJoCo's forward kinematics puts it (geom_xpos, geom_xmat), for a random pose."""
    from sim2real.sim.robot import resolve_mjcf

    model = mujoco.MjModel.from_xml_path(str(resolve_mjcf("sim/models/go2/scene.xml")))
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    data.qpos[:] = model.qpos0 + rng.normal(0, 0.3, model.nq)
    data.qpos[3:7] /= np.linalg.norm(data.qpos[3:7])
    mujoco.mj_kinematics(model, data)
    xpos, xquat = body_poses(model, data.qpos)
    assert np.allclose(xpos, data.xpos, atol=1e-5) and np.allclose(xquat, data.xquat, atol=1e-5)
    geoms = model_geoms(model)
    assert len(geoms) == model.ngeom  # everything of this model is in groups 0-2
    for k, g in enumerate(geoms):
        centre = transform_points(np.zeros((1, 3)), g.pos, g.quat)
        world_centre = transform_points(centre, xpos[g.body], xquat[g.body])[0]
        assert np.allclose(world_centre, data.geom_xpos[k], atol=1e-5), g.name
        rot = quat_to_matrix(xquat[g.body]) @ quat_to_matrix(g.quat)
        assert np.allclose(rot, data.geom_xmat[k].reshape(3, 3), atol=1e-5), g.name


MESH_XML = """
<mujoco>
  <asset>
    <mesh name="tet" vertex="0 0 0  0.2 0 0  0 0.2 0  0 0 0.2"/>
    <material name="red" rgba="1 0 0 1"/>
  </asset>
  <worldbody>
    <body name="b" pos="1 2 3" euler="0 0 90">
      <freejoint/>
      <geom name="m" type="mesh" mesh="tet" material="red"/>
      <geom name="collision" type="box" size=".1 .1 .1" group="3"/>
    </body>
    <body name="only_collision" pos="0 0 1">
      <geom name="c" type="sphere" size=".05" group="3" rgba="0 0 1 1"/>
    </body>
    <geom name="invisible" type="sphere" size=".05" rgba="0 0 0 0"/>
  </worldbody>
</mujoco>
"""


def test_a_mesh_geom_keeps_its_compiled_vertices_and_material_colour():
    model = mujoco.MjModel.from_xml_string(MESH_XML)
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    geoms = {g.name: g for g in model_geoms(model)}
    # the collision box of a body with a visual geom is hidden, the transparent one too; a body with collision geoms
    # only is drawn by them
    assert set(geoms) == {"m", "c"}
    mesh = geoms["m"]
    assert mesh.vertices.shape == (4, 3) and mesh.faces.shape == (4, 3)
    assert mesh.rgba == (1.0, 0.0, 0.0, 1.0)
    xpos, xquat = body_poses(model, data.qpos)
    world = _world_vertices(model, mesh, xpos, xquat)
    # MuJoCo's own world vertices of the mesh: its compiled vertices through geom_xpos/geom_xmat
    g = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "m")
    expected = mesh.vertices @ data.geom_xmat[g].reshape(3, 3).T + data.geom_xpos[g]
    assert np.allclose(world, expected, atol=1e-5)
    # and the tetrahedron's corners as written in the MJCF, rotated 90 degrees about z, at (1, 2, 3)
    written = np.array([[0, 0, 0], [0.2, 0, 0], [0, 0.2, 0], [0, 0, 0.2]])
    corners = written @ quat_to_matrix((np.cos(np.pi / 4), 0, 0, np.sin(np.pi / 4))).T + [1, 2, 3]
    assert np.allclose(np.sort(world, axis=0), np.sort(corners, axis=0), atol=1e-5)


def test_a_height_field_is_a_grid_of_its_heights():
    xml = """<mujoco><asset><hfield name="h" nrow="3" ncol="4" size="1 0.5 0.2 0.1"
             elevation="0 0 0 0  0 1 1 0  0 0 0 0"/></asset>
             <worldbody><geom type="hfield" hfield="h"/></worldbody></mujoco>"""
    (geom,) = model_geoms(mujoco.MjModel.from_xml_string(xml))
    assert geom.vertices.shape == (12, 3) and geom.faces.shape == (2 * 2 * 3, 3)
    assert np.allclose(geom.vertices[:, 0].min(), -1) and np.allclose(geom.vertices[:, 1].max(), 0.5)
    assert np.isclose(geom.vertices[:, 2].max(), 0.2) and np.isclose(geom.vertices[:, 2].min(), 0.0)


def test_body_poses_of_a_trajectory_and_a_wrong_width():
    model = quadrotor_model({"arm_length": 0.05}, count=2)
    assert model.nq == 14
    qpos = np.zeros((3, 14))
    qpos[:, 3] = qpos[:, 10] = 1.0
    qpos[:, 0] = [0.0, 0.5, 1.0]  # drone 0 moves along x
    qpos[:, 9] = 2.0              # drone 1 hovers at z = 2
    xpos, xquat = body_poses(model, qpos)
    assert xpos.shape == (3, 3, 3) and xquat.shape == (3, 3, 4) and xpos.dtype == np.float32
    assert np.allclose(xpos[:, 1, 0], [0.0, 0.5, 1.0]) and np.allclose(xpos[:, 2, 2], 2.0)
    with pytest.raises(ValueError, match="nq = 14"):
        body_poses(model, np.zeros((2, 7)))


def test_a_recorder_freezes_ended_envs_and_tracks_markers():
    model = quadrotor_model({}, count=1)
    rec = TraceRecorder([model, model])

    def q(x):
        return [[x, 0, 1, 1, 0, 0, 0], [x, 1, 1, 1, 0, 0, 0]]

    def goal(x):
        return Marker("goal", "sphere", (0.02,), (0, 1, 0, 0.5), (x, 0.0, 1.0))

    rec.add(q(0.0), [[goal(0.0)], []])
    rec.add(q(1.0), [[goal(1.0)], [goal(5.0)]], live=[True, False])  # env 1 ended: keeps frame 0, no goal
    rec.add(q(2.0), [[], [goal(9.0)]], live=[True, False])            # env 0's goal gone
    trace = rec.trace("t", 0.02)
    assert trace.frames == 3 and trace.dt == 0.02 and [e.label for e in trace.envs] == ["env 0", "env 1"]
    e0, e1 = trace.envs
    assert np.allclose(e0.xpos[:, 1, 0], [0, 1, 2]) and np.allclose(e1.xpos[:, 1, 0], [0, 0, 0])
    (g0,) = e0.markers
    assert list(g0.visible) == [True, True, False] and np.allclose(g0.pos[:, 0], [0, 1, 1])
    assert e1.markers == []  # env 1 never showed a goal while live
    with pytest.raises(ValueError, match="one qpos and one marker list per scene"):
        rec.add(q(0.0)[:1])
    with pytest.raises(ValueError, match="no frames"):
        TraceRecorder([model]).trace("t", 0.1)


def test_a_marker_that_changes_its_look_is_a_new_track():
    """A task's markers may change colour or size over time (a footstep fading once walked, a new goal's pole): the
    viewer draws each look of a name as its own track, shown while the marker looks that way."""
    rec = TraceRecorder([quadrotor_model({}, count=1)])
    blue, faded = (0.2, 0.45, 1.0, 0.6), (0.2, 0.45, 1.0, 0.25)
    for x, rgba in ((0.0, blue), (0.1, blue), (0.2, faded), (0.3, blue)):
        rec.add([[x, 0, 1, 1, 0, 0, 0]], [[Marker("step/1", "box", (0.1, 0.05, 0.003), rgba, (x, 0.0, 0.003))]])
    (e,) = rec.trace("t", 0.02).envs
    first, second = e.markers
    assert (first.marker.name, first.marker.rgba, second.marker.rgba) == ("step/1", blue, faded)
    assert list(first.visible) == [True, True, False, True] and list(second.visible) == [False, False, True, False]
    assert np.allclose(first.pos[:, 0], [0.0, 0.1, 0.1, 0.3]) and second.pos[2, 0] == pytest.approx(0.2)
