"""What a 3D viewer draws of a rollout (``sim2real view``): the geometry of a compiled MuJoCo model as triangle meshes,
body poses by forward kinematics, task markers, and the recorded trace of N envs over time.

Nothing here draws: :mod:`sim2real.viewer` serves a :class:`SceneTrace` in the browser. Tasks describe their scenes
through a *scene view* (their spec's ``view`` hook, :class:`SceneView`: models and poses) and their markers through
their spec's ``markers`` hook (:class:`~sim2real.sim.markers.Marker`, the same markers their videos draw);
:class:`TraceRecorder` turns the snapshots into a trace.

Conventions: world frame z up, metres; quaternions (w, x, y, z), Hamilton, as in MuJoCo (and viser: its ``wxyz``
is the same order); a geom's or marker's ``size`` follows MuJoCo's geom convention (sphere: radius; capsule and
cylinder: radius, half-length along z; box: half-extents; ellipsoid: semi-axes; plane: half-extents x, y, 0 for
infinite); colours are RGBA in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import mujoco
import numpy as np

from sim2real.sim.markers import Marker

#: Geom groups a viewer shows (MuJoCo's own viewer shows 0-2; robot models put collision-only geoms in 3+).
VISIBLE_GROUPS = (0, 1, 2)
#: Half-extent [m] a viewer gives an infinite plane (a plane geom of size 0).
PLANE_EXTENT = 8.0
_G = mujoco.mjtGeom
SHAPES = {"plane": _G.mjGEOM_PLANE, "sphere": _G.mjGEOM_SPHERE, "capsule": _G.mjGEOM_CAPSULE,
          "ellipsoid": _G.mjGEOM_ELLIPSOID, "cylinder": _G.mjGEOM_CYLINDER, "box": _G.mjGEOM_BOX}
_DEFAULT_RGBA = (0.5, 0.5, 0.5, 1.0)


# --- geometry ----------------------------------------------------------------------------------------------------
def quat_to_matrix(quat) -> np.ndarray:
    """Rotation matrices ``[..., 3, 3]`` (frame to parent) of (w, x, y, z) quaternions ``[..., 4]`` (normalised)."""
    q = np.asarray(quat, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack((1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                     2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                     2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)), axis=-1
                    ).reshape(q.shape[:-1] + (3, 3))


def quat_mul(a, b) -> np.ndarray:
    """Hamilton product ``a ⊗ b`` of (w, x, y, z) quaternions ``[..., 4]``."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    w1, x1, y1, z1 = np.moveaxis(a, -1, 0)
    w2, x2, y2, z2 = np.moveaxis(b, -1, 0)
    return np.stack((w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2), axis=-1)


def transform_points(points, pos, quat) -> np.ndarray:
    """``points`` ``[V, 3]`` given in a frame at ``pos`` ``[3]`` with orientation ``quat`` ``[4]`` (w, x, y, z) in
    its parent, expressed in the parent: ``R(quat) p + pos``."""
    return np.asarray(points, dtype=np.float64) @ quat_to_matrix(quat).T + np.asarray(pos, dtype=np.float64)


def primitive_mesh(shape: str | int, size: Sequence[float], plane_extent: float = PLANE_EXTENT
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Triangle mesh of a MuJoCo primitive in its own frame: vertices ``[V, 3]`` float32 (m), faces ``[F, 3]``
    uint32 (counter-clockwise seen from outside). ``shape``: a name of :data:`SHAPES` or a ``mjtGeom``; ``size``:
    MuJoCo's geom size (see the module docstring); a plane of size 0 gets half-extent ``plane_extent``.

    Raises:
        ValueError: another geom type (mesh, hfield: see :func:`model_geoms`), or a size <= 0 where one is needed.
    """
    import trimesh.creation as tc

    kind = SHAPES.get(shape, None) if isinstance(shape, str) else _G(int(shape))
    if kind is None:
        raise ValueError(f"not a primitive shape: {shape!r} (choose {', '.join(SHAPES)})")
    s = [float(v) for v in size] + [0.0] * (3 - len(size))
    if kind == _G.mjGEOM_PLANE:
        hx, hy = (s[0] if s[0] > 0 else plane_extent), (s[1] if s[1] > 0 else plane_extent)
        v = np.array([[-hx, -hy, 0], [hx, -hy, 0], [hx, hy, 0], [-hx, hy, 0]], dtype=np.float32)
        return v, np.array([[0, 1, 2], [0, 2, 3]], dtype=np.uint32)
    needed = {_G.mjGEOM_SPHERE: 1, _G.mjGEOM_CAPSULE: 2, _G.mjGEOM_CYLINDER: 2, _G.mjGEOM_BOX: 3,
              _G.mjGEOM_ELLIPSOID: 3}.get(kind)
    if needed is None:
        raise ValueError(f"not a primitive shape: {kind.name}")
    if min(s[:needed]) <= 0:
        raise ValueError(f"{kind.name} size must be > 0, got {list(size)}")
    if kind == _G.mjGEOM_SPHERE:
        mesh = tc.icosphere(subdivisions=2, radius=s[0])
    elif kind == _G.mjGEOM_ELLIPSOID:
        mesh = tc.icosphere(subdivisions=2, radius=1.0)
        mesh.vertices = mesh.vertices * np.array(s[:3])
    elif kind == _G.mjGEOM_CAPSULE:
        mesh = tc.capsule(height=2 * s[1], radius=s[0], count=[16, 16])
    elif kind == _G.mjGEOM_CYLINDER:
        mesh = tc.cylinder(radius=s[0], height=2 * s[1], sections=24)
    else:
        mesh = tc.box(extents=[2 * s[0], 2 * s[1], 2 * s[2]])
    return np.asarray(mesh.vertices, dtype=np.float32), np.asarray(mesh.faces, dtype=np.uint32)


def _hfield_mesh(model: mujoco.MjModel, hid: int) -> tuple[np.ndarray, np.ndarray]:
    """The top surface of height field ``hid`` as a grid mesh in its geom's frame (MuJoCo's layout: row = y)."""
    nrow, ncol = int(model.hfield_nrow[hid]), int(model.hfield_ncol[hid])
    sx, sy, sz, _ = model.hfield_size[hid]
    adr = int(model.hfield_adr[hid])
    h = model.hfield_data[adr:adr + nrow * ncol].reshape(nrow, ncol) * sz
    x, y = np.meshgrid(np.linspace(-sx, sx, ncol), np.linspace(-sy, sy, nrow))
    v = np.stack((x, y, h), axis=-1).reshape(-1, 3).astype(np.float32)
    i = (np.arange(nrow - 1)[:, None] * ncol + np.arange(ncol - 1)[None, :]).ravel()
    faces = np.concatenate((np.stack((i, i + 1, i + ncol + 1), 1), np.stack((i, i + ncol + 1, i + ncol), 1)))
    return v, faces.astype(np.uint32)


@dataclass(frozen=True)
class GeomMesh:
    """One geom of a model as a triangle mesh: ``vertices`` ``[V, 3]`` float32 in the geom's frame (m), ``faces``
    ``[F, 3]`` uint32, ``rgba``, and the geom's frame in its body's frame (``pos`` [3] m, ``quat`` [4] w, x, y, z).
    ``body`` is the model's body id (0: the world, static)."""

    name: str
    body: int
    vertices: np.ndarray
    faces: np.ndarray
    rgba: tuple[float, float, float, float]
    pos: np.ndarray
    quat: np.ndarray


def geom_rgba(model: mujoco.MjModel, g: int) -> tuple[float, float, float, float]:
    """The colour MuJoCo draws geom ``g`` in: its material's when the geom has a material and no rgba of its own."""
    rgba = tuple(float(v) for v in model.geom_rgba[g])
    mat = int(model.geom_matid[g])
    if mat >= 0 and np.allclose(rgba, _DEFAULT_RGBA):
        rgba = tuple(float(v) for v in model.mat_rgba[mat])
    return rgba


def model_geoms(model: mujoco.MjModel, groups: Sequence[int] = VISIBLE_GROUPS,
                plane_extent: float = PLANE_EXTENT) -> list[GeomMesh]:
    """Every drawable geom of ``model``: primitives, meshes (``mesh_vert``/``mesh_face``, already in the geom's
    frame as MuJoCo compiled them) and height fields; fully transparent geoms and geom types a viewer does not draw
    (SDF, flex, skins) are left out, and so are geoms outside ``groups``, except on a body that has none inside
    them (a model without visual meshes, e.g. collision geoms in group 3 only, is drawn by its collision geoms)."""
    shown = {int(model.geom_bodyid[g]) for g in range(model.ngeom)
             if int(model.geom_group[g]) in groups and model.geom_rgba[g, 3] > 0}
    out = []
    for g in range(model.ngeom):
        rgba = geom_rgba(model, g)
        if rgba[3] <= 0.0 or (int(model.geom_group[g]) not in groups and int(model.geom_bodyid[g]) in shown):
            continue
        kind = _G(int(model.geom_type[g]))
        if kind == _G.mjGEOM_MESH:
            m = int(model.geom_dataid[g])
            va, vn = int(model.mesh_vertadr[m]), int(model.mesh_vertnum[m])
            fa, fn = int(model.mesh_faceadr[m]), int(model.mesh_facenum[m])
            v = np.array(model.mesh_vert[va:va + vn], dtype=np.float32)
            f = np.array(model.mesh_face[fa:fa + fn], dtype=np.uint32)
        elif kind == _G.mjGEOM_HFIELD:
            v, f = _hfield_mesh(model, int(model.geom_dataid[g]))
        elif kind in SHAPES.values():
            v, f = primitive_mesh(kind, model.geom_size[g], plane_extent)
        else:
            continue
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) or f"geom{g}"
        out.append(GeomMesh(name, int(model.geom_bodyid[g]), v, f, rgba, np.array(model.geom_pos[g]),
                            np.array(model.geom_quat[g])))
    return out


def body_poses(model: mujoco.MjModel, qpos: np.ndarray, data: mujoco.MjData | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Forward kinematics of ``qpos`` ``[T, nq]`` (or ``[nq]``): body positions ``[T, nbody, 3]`` (m) and
    orientations ``[T, nbody, 4]`` (w, x, y, z), world frame, float32 (``mj_kinematics``; mocap bodies at their
    model pose).

    Raises:
        ValueError: ``qpos`` is not ``nq`` wide.
    """
    q = np.asarray(qpos, dtype=np.float64)
    single = q.ndim == 1
    q = q.reshape(-1, q.shape[-1])
    if q.shape[-1] != model.nq:
        raise ValueError(f"qpos has {q.shape[-1]} columns, the model has nq = {model.nq}")
    data = mujoco.MjData(model) if data is None else data
    xpos = np.empty((len(q), model.nbody, 3), dtype=np.float32)
    xquat = np.empty((len(q), model.nbody, 4), dtype=np.float32)
    for t, row in enumerate(q):
        data.qpos[:] = row
        mujoco.mj_kinematics(model, data)
        xpos[t], xquat[t] = data.xpos, data.xquat
    return (xpos[0], xquat[0]) if single else (xpos, xquat)


# --- markers and traces ------------------------------------------------------------------------------------------
@dataclass
class MarkerTrack:
    """A marker over the T frames, one name in one look: ``marker`` (its name, shape, size and colour), ``pos``
    ``[T, 3]``, ``quat`` ``[T, 4]``, ``visible`` ``[T]`` bool (False where it was absent, or looked otherwise)."""

    marker: Marker
    pos: np.ndarray
    quat: np.ndarray
    visible: np.ndarray


@dataclass
class EnvTrace:
    """One env of a trace: the ``model`` its geometry comes from, body poses ``xpos`` ``[T, nbody, 3]`` and
    ``xquat`` ``[T, nbody, 4]`` (world frame), its ``markers`` and a ``label``."""

    label: str
    model: mujoco.MjModel
    xpos: np.ndarray
    xquat: np.ndarray
    markers: list[MarkerTrack] = field(default_factory=list)


@dataclass
class SceneTrace:
    """What ``sim2real view`` serves: ``envs`` (all ``frames`` long), ``dt`` seconds between frames, a ``title``."""

    title: str
    dt: float
    envs: list[EnvTrace]

    @property
    def frames(self) -> int:
        return int(self.envs[0].xpos.shape[0]) if self.envs else 0


class SceneView(Protocol):
    """A task's scene view (its spec's ``view`` hook, built as ``cls(env)`` on an eval-mode env): what to draw of
    each of the env's scenes. A scene is one env of the task, or one room of several robots; the env's rows map to
    scenes in order (row ``r`` is scene ``r // (num_envs // len(models()))``). The scenes' markers come from the
    task's ``markers`` hook, one list per scene in the same order."""

    def models(self) -> list[mujoco.MjModel]:
        """One model per scene (its geometry, including the scene's obstacles and terrain)."""

    def labels(self) -> list[str]:
        """One line per scene for the viewer's env selector."""

    def qpos(self) -> np.ndarray:
        """The scenes' generalised positions now, ``[S, nq]`` (each scene's model's ``nq``; a list if they differ)."""


class TraceRecorder:
    """Collect snapshots of S scenes into a :class:`SceneTrace`: each :meth:`add` is one frame.

    Args:
        models: one model per scene.
        labels: one label per scene (default ``env <i>``).
    """

    def __init__(self, models: Sequence[mujoco.MjModel], labels: Sequence[str] | None = None):
        self.models = list(models)
        self.labels = list(labels) if labels is not None else [f"env {i}" for i in range(len(self.models))]
        if len(self.labels) != len(self.models):
            raise ValueError(f"{len(self.labels)} labels for {len(self.models)} scenes")
        self._data = [mujoco.MjData(m) for m in self.models]
        self._poses: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in self.models]
        self._marks: list[dict[tuple, dict]] = [{} for _ in self.models]  # per scene: track key -> track
        self._last: list[list[Marker] | None] = [None] * len(self.models)
        self.frames = 0

    def add(self, qpos, markers: Sequence[Sequence[Marker]] | None = None, live=None) -> None:
        """One frame: ``qpos`` per scene (``[S, nq]`` or a list), ``markers`` per scene (None: none), ``live``
        ``[S]`` bool (None: all): a scene not live repeats its previous frame (an ended episode stays as it ended).

        Raises:
            ValueError: a count or width that does not match the scenes.
        """
        s = len(self.models)
        if len(qpos) != s or (markers is not None and len(markers) != s):
            raise ValueError(f"a frame needs one qpos and one marker list per scene ({s})")
        live = np.ones(s, dtype=bool) if live is None else np.asarray(live, dtype=bool).reshape(s)
        for i in range(s):
            if self._poses[i] and not live[i]:
                self._poses[i].append(self._poses[i][-1])
                mk = self._last[i]
            else:
                self._poses[i].append(body_poses(self.models[i], qpos[i], self._data[i]))
                mk = list(markers[i]) if markers is not None else []
                self._last[i] = mk
            self._add_markers(i, mk or [])
        self.frames += 1

    def _add_markers(self, i: int, markers: list[Marker]) -> None:
        tracks, t = self._marks[i], self.frames
        seen = set()
        for m in markers:
            key = _track_key(m)
            seen.add(key)
            tr = tracks.get(key)
            if tr is None:  # a marker (or a new look of one) first seen now: absent before
                tr = tracks[key] = {"marker": m, "pos": [m.pos] * t, "quat": [m.quat] * t, "visible": [False] * t}
            tr["pos"].append(m.pos)
            tr["quat"].append(m.quat)
            tr["visible"].append(True)
        for key, tr in tracks.items():
            if key not in seen:
                tr["pos"].append(tr["pos"][-1])
                tr["quat"].append(tr["quat"][-1])
                tr["visible"].append(False)

    def trace(self, title: str, dt: float) -> SceneTrace:
        """The frames so far as a :class:`SceneTrace` (``dt``: seconds between frames).

        Raises:
            ValueError: no frame was added.
        """
        if not self.frames:
            raise ValueError("no frames recorded")
        envs = []
        for i, model in enumerate(self.models):
            xpos = np.stack([p for p, _ in self._poses[i]])
            xquat = np.stack([q for _, q in self._poses[i]])
            tracks = [MarkerTrack(tr["marker"], np.asarray(tr["pos"], dtype=np.float32),
                                  np.asarray(tr["quat"], dtype=np.float32), np.asarray(tr["visible"], dtype=bool))
                      for tr in self._marks[i].values()]
            envs.append(EnvTrace(self.labels[i], model, xpos, xquat, tracks))
        return SceneTrace(title, float(dt), envs)


def _track_key(m: Marker) -> tuple:
    """What makes a marker one track: its name and its look (shape, size, colour)."""
    return m.name, m.shape, tuple(float(v) for v in m.size), tuple(float(v) for v in m.rgba)


# --- a quadrotor to draw -----------------------------------------------------------------------------------------
#: Opacity of a drone's halo (:func:`quadrotor_model`).
HALO_ALPHA = 0.35

def quadrotor_model(robot: dict, count: int = 1, colours: Sequence[tuple] | None = None,
                    floor: float = PLANE_EXTENT, halo: float = 0.0) -> mujoco.MjModel:
    """A visual stand-in for ``count`` quadrotors of a ``kind: quadrotor`` robot config (the tasks' physics is
    their own torch dynamics, not MuJoCo): per drone a body ``drone<i>`` with a free joint (qpos ``[7 i, 7 i + 7)``
    = position, quaternion w, x, y, z), two crossed arms of ``arm_length``, four rotor discs and a red nose on +x;
    a floor plane of half-extent ``floor`` m at z = 0. ``colours``: arm colour per drone (RGB(A) in [0, 1]).
    ``halo`` [m]: the radius of a translucent sphere of the drone's colour around each drone (geom ``halo<i>``;
    0: none), so that a drone 10 cm across shows in a view of a whole room; drawing only (no model here is
    simulated)."""
    a = float(robot.get("arm_length", 0.046))
    dirs = np.asarray(robot.get("motor_directions_b", [[1, -1], [-1, -1], [-1, 1], [1, 1]]), dtype=float)
    dirs = a * dirs / np.linalg.norm(dirs, axis=1, keepdims=True)
    bodies = []
    for i in range(int(count)):
        c = tuple(colours[i % len(colours)]) if colours else (0.15, 0.15, 0.18)
        rgba = " ".join(f"{v:.3f}" for v in (tuple(c) + (1.0,))[:4])
        rgb = " ".join(rgba.split()[:3])
        rotors = "".join(f'<geom type="cylinder" size="{0.45 * a:.4f} .002" pos="{x:.4f} {y:.4f} .008" '
                         f'rgba=".75 .75 .8 .7"/>' for x, y in dirs)
        bodies.append(
            f'<body name="drone{i}"><freejoint/>'
            f'<geom type="box" size="{a:.4f} {0.22 * a:.4f} .006" euler="0 0 .7854" rgba="{rgba}"/>'
            f'<geom type="box" size="{a:.4f} {0.22 * a:.4f} .006" euler="0 0 -.7854" rgba="{rgba}"/>'
            f'<geom type="box" size="{0.3 * a:.4f} {0.3 * a:.4f} .01" rgba="{rgba}"/>'
            f'<geom type="sphere" size="{0.15 * a:.4f}" pos="{0.45 * a:.4f} 0 .012" rgba=".9 .1 .1 1"/>'
            f'{rotors}'
            + (f'<geom name="halo{i}" type="sphere" size="{halo:.4f}" rgba="{rgb} {HALO_ALPHA}"/>' if halo > 0 else "")
            + '</body>')
    xml = (f'<mujoco model="quadrotor_view"><option gravity="0 0 0"/><worldbody>'
           f'<geom name="floor" type="plane" size="{floor} {floor} .1" rgba=".55 .6 .65 1"/>'
           f'{"".join(bodies)}</worldbody></mujoco>')
    return mujoco.MjModel.from_xml_string(xml)
