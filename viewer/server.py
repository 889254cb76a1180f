"""The browser viewer of a :class:`~sim2real.sim.scene.SceneTrace` (``sim2real view``), served with viser.

One env (scene) is drawn at a time: its model's geoms (:func:`~sim2real.sim.scene.model_geoms`) as meshes under one
viser frame per body, posed every frame from the trace's ``xpos``/``xquat``, its world geoms (floor, obstacles,
terrain) and its markers. viser's quaternions are ``wxyz``, the same order as MuJoCo's; its world is set z-up like
MuJoCo's. The control panel has the env selector, the timeline (frame slider), play/pause, the playback speed and
switches for the robot and the markers. A large translucent box marker (a swarm room's wall) is drawn as its edges
(:func:`drawn_as_edges`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import socket
import threading
import time

import numpy as np

from sim2real.configs import ConfigError
from sim2real.sim.scene import PLANE_EXTENT, GeomMesh, SceneTrace, model_geoms, primitive_mesh

#: Playback speeds offered (x real time).
SPEEDS = ("0.1", "0.25", "0.5", "1", "2", "4")
_MIN_PERIOD_S = 1.0 / 60.0  # redraw at most this often; faster playback skips frames


def _rgb(rgba) -> tuple[int, int, int]:
    return tuple(int(round(255 * min(max(float(c), 0.0), 1.0))) for c in rgba[:3])


def _opacity(rgba) -> float | None:
    return None if float(rgba[3]) >= 1.0 else float(rgba[3])


#: A translucent box marker with a half-extent of at least this [m] (a swarm room's wall) is drawn as its edges.
EDGES_FROM_M = 1.0
#: The edges' colour: the marker's, darkened by this factor (a translucent wall's pale colour on the white page).
EDGE_SHADE = 0.6


def drawn_as_edges(marker) -> bool:
    """Whether ``marker`` is drawn as the 12 edges of its box rather than as a surface: a translucent box of a
    half-extent >= :data:`EDGES_FROM_M` (a wall). The browser draws translucent surfaces one after the other in the
    order of their centres, each hiding from the ones drawn after it what lies behind it: a wall's surface, drawn
    before a drone or goal behind it but nearer to the camera than its centre, would hide them."""
    return marker.shape == "box" and float(marker.rgba[3]) < 1.0 and max(marker.size) >= EDGES_FROM_M


def box_edges(size) -> np.ndarray:
    """``[12, 2, 3]``: the edges (segment end points) of a box of half-extents ``size`` about its centre."""
    h = np.asarray(size, dtype=np.float32)
    corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=np.float32) * h
    pairs = [(a, b) for a in range(8) for b in range(a + 1, 8) if bin(a ^ b).count("1") == 1]
    return np.stack([corners[[a, b]] for a, b in pairs])


def check_bindable(host: str, port: int) -> None:
    """Refuse an address viser could not serve on, before it tries: viser's server loop takes any error binding
    ``host``:``port`` for a port in use and tries the next 1000 ports, then never reports back (the caller waits
    forever). A plain socket bind of every address ``host`` resolves to tells them apart: a port in use passes (viser
    moves to the next free one), anything else (an address of another machine, a name that does not resolve, a
    privileged port) is refused.

    Raises:
        ConfigError: ``host``:``port`` cannot be served on (one line, with the system's reason).
    """
    where = f"--host {host} --port {port}"
    try:
        addresses = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"view {where}: cannot resolve {host!r} ({getattr(exc, 'strerror', None) or exc})") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's server does
            try:
                s.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE and int(port) < 65535:
                    continue  # viser takes the next free port
                hint = (" (ports below 1024 need privileges)" if exc.errno == errno.EACCES else
                        f" ({host} is not an address of this machine; --host 0.0.0.0 serves on every interface)"
                        if exc.errno == errno.EADDRNOTAVAIL else "")
                raise ConfigError(f"view {where}: cannot serve there: {exc.strerror or exc}{hint}") from None


def camera_for(trace: SceneTrace, env: int = 0, frame: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A camera ``(position, look_at)`` (world frame, m) that frames env ``env``'s robot and small markers at
    ``frame``: looking at their centre from the front-left, above, at a distance that fits their extent (body
    origins plus the largest robot geom's bounding radius)."""
    e = trace.envs[env]
    model = e.model
    robot = [g for g in range(model.ngeom) if model.geom_bodyid[g] > 0]
    reach = max((float(model.geom_rbound[g]) for g in robot), default=0.1)
    points = [e.xpos[frame, 1:]] if e.xpos.shape[1] > 1 else [e.xpos[frame]]
    # small markers (goals, targets) count; room-sized ones (walls, columns) do not
    points += [tr.pos[frame][None] for tr in e.markers if tr.visible[frame] and max(tr.marker.size) < 0.5]
    p = np.concatenate(points).astype(np.float64)
    lo, hi = p.min(0), p.max(0)
    centre = (lo + hi) / 2
    radius = max(float(np.linalg.norm(hi - lo)) / 2 + reach, 0.1)
    direction = np.array([1.0, -1.6, 0.9])
    return centre + direction / np.linalg.norm(direction) * (2.6 * radius + 0.1), centre


class SceneViewer:
    """Serve ``trace`` at ``http://host:port`` until :meth:`stop`.

    Args:
        trace: what to show (at least one env and one frame).
        host, port: where to listen (``port`` 0: a free port; a port in use: the next free one).
        playing: start playing (else paused at frame 0).
        loop: start over at the end.

    Raises:
        ValueError: an empty trace. ConfigError: ``host``:``port`` cannot be served on (:func:`check_bindable`).
    """

    def __init__(self, trace: SceneTrace, host: str = "127.0.0.1", port: int = 8080, playing: bool = True,
                 loop: bool = True):
        import viser

        if not trace.envs or trace.frames < 1:
            raise ValueError("view: the trace has no frames to show")
        check_bindable(host, port)
        self.trace, self.loop = trace, loop
        self._lock = threading.RLock()
        self._env, self._frame = 0, 0
        self._playing = playing
        self._speed = 1.0
        self._robot_visible = self._markers_visible = True
        self._bodies: dict[int, object] = {}
        self._markers: list = []
        self._geoms: dict[int, list[GeomMesh]] = {}
        with contextlib.redirect_stdout(io.StringIO()):  # viser's banner: the caller prints the URL
            self.server = viser.ViserServer(host=host, port=int(port), label=trace.title, verbose=False)
        self._stop, self._thread = threading.Event(), None
        try:
            self._start()
        except BaseException:  # (Ctrl-C while the scene is sent): the server does not outlive us
            self.stop()
            raise

    def _start(self) -> None:
        scene = self.server.scene
        scene.set_up_direction("+z")
        # Plain lights, no environment map and no shadows: cheap enough for software WebGL (a headless browser
        # settles in seconds instead of half a minute), and no shadow acne on the floor.
        scene.configure_environment_map(None)
        scene.configure_default_lights(True, cast_shadow=False)
        self.server.gui.configure_theme(show_logo=False, show_share_button=False)
        self._build_gui()
        self._build_env(0)
        self.aim_camera()
        self._thread = threading.Thread(target=self._play_loop, name="sim2real-view-playback", daemon=True)
        self._thread.start()

    # --- public -------------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the viewer (``0.0.0.0`` is shown as ``localhost``)."""
        host = self.server.get_host()
        return f"http://{'localhost' if host in ('0.0.0.0', '::', '') else host}:{self.server.get_port()}"

    def clients(self) -> int:
        """Browser tabs connected now."""
        return len(self.server.get_clients())

    def show(self, env: int | None = None, frame: int | None = None, playing: bool | None = None,
             robot: bool | None = None, markers: bool | None = None) -> None:
        """Set what is shown (each None: unchanged); the control panel follows. A browser applies the whole change
        at once (one atomic batch of viser messages: never a frame with part of the robots hidden).

        Raises:
            IndexError: ``env`` or ``frame`` out of range.
        """
        with self._lock, self.server.atomic():
            if env is not None:
                if not 0 <= env < len(self.trace.envs):
                    raise IndexError(f"env {env} out of range 0..{len(self.trace.envs) - 1}")
                self._gui_env.value = self.trace.envs[env].label
                if env != self._env:
                    self._build_env(env)
            if frame is not None:
                if not 0 <= frame < self.trace.frames:
                    raise IndexError(f"frame {frame} out of range 0..{self.trace.frames - 1}")
                self._set_frame(frame)
            if playing is not None:
                self._set_playing(playing)
            if robot is not None:
                self._gui_robot.value = robot
                self._set_robot_visible(robot)
            if markers is not None:
                self._gui_markers.value = markers
                self._set_markers_visible(markers)

    def aim_camera(self, frame: int | None = None) -> None:
        """Set the camera new tabs open with (and "Reset View" returns to) to frame the shown env at ``frame``
        (None: the frame shown now); :func:`camera_for`. Tabs already open keep their camera."""
        with self._lock:
            position, look_at = camera_for(self.trace, self._env, self._frame if frame is None else int(frame))
            self.server.initial_camera.position = tuple(position)
            self.server.initial_camera.look_at = tuple(look_at)

    def stop(self) -> None:
        """Stop playback and the server (idempotent)."""
        if self._thread is not None:
            self._stop.set()
            if self._thread.is_alive():
                self._thread.join(timeout=2.0)
        with contextlib.redirect_stdout(io.StringIO()):  # viser's "(viser) Server stopped", printed from its thread
            self.server.stop()

    def __enter__(self) -> "SceneViewer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- scene --------------------------------------------------------------------------------------------------
    def _geoms_of(self, env: int) -> list[GeomMesh]:
        model = self.trace.envs[env].model
        key = id(model)
        if key not in self._geoms:
            self._geoms[key] = model_geoms(model)
        return self._geoms[key]

    def _build_env(self, env: int) -> None:
        scene = self.server.scene
        e = self.trace.envs[env]
        with self.server.atomic():
            scene.reset()
            scene.add_light_ambient("/light/ambient", intensity=0.8)
            scene.add_grid("/floor_grid", width=2 * PLANE_EXTENT, height=2 * PLANE_EXTENT, cell_size=0.5,
                           section_size=2.0, position=(0.0, 0.0, 0.001), cell_color=(170, 175, 185),
                           section_color=(120, 125, 140))
            self._bodies, self._markers = {}, []
            geoms = self._geoms_of(env)
            for b in sorted({g.body for g in geoms if g.body > 0}):
                self._bodies[b] = scene.add_frame(f"/robot/body{b}", show_axes=False, visible=self._robot_visible)
            for k, g in enumerate(geoms):
                parent = "/world" if g.body == 0 else f"/robot/body{g.body}"
                scene.add_mesh_simple(f"{parent}/geom{k}", g.vertices, g.faces, color=_rgb(g.rgba),
                                      opacity=_opacity(g.rgba), position=tuple(g.pos), wxyz=tuple(g.quat),
                                      side="double" if g.vertices.shape[0] <= 4 else "front")
            for k, tr in enumerate(e.markers):
                m = tr.marker
                if drawn_as_edges(m):
                    handle = scene.add_line_segments(f"/markers/m{k}", box_edges(m.size),
                                                     _rgb([EDGE_SHADE * c for c in m.rgba[:3]]),
                                                     thickness=2.0, thickness_units="screen", visible=False)
                else:
                    v, f = primitive_mesh(m.shape, m.size)
                    handle = scene.add_mesh_simple(f"/markers/m{k}", v, f, color=_rgb(m.rgba),
                                                   opacity=_opacity(m.rgba), cast_shadow=False, visible=False)
                self._markers.append((tr, handle))
            self._env = env
            self._pose(self._frame)

    def _pose(self, frame: int) -> None:
        e = self.trace.envs[self._env]
        with self.server.atomic():
            for b, handle in self._bodies.items():
                handle.position = e.xpos[frame, b]
                handle.wxyz = e.xquat[frame, b]
            for tr, handle in self._markers:
                handle.position = tr.pos[frame]
                handle.wxyz = tr.quat[frame]
                handle.visible = bool(tr.visible[frame]) and self._markers_visible

    def _set_robot_visible(self, visible: bool) -> None:
        self._robot_visible = bool(visible)
        with self.server.atomic():
            for handle in self._bodies.values():
                handle.visible = self._robot_visible

    def _set_markers_visible(self, visible: bool) -> None:
        self._markers_visible = bool(visible)
        self._pose(self._frame)

    # --- playback -----------------------------------------------------------------------------------------------
    def _set_frame(self, frame: int, from_gui: bool = False) -> None:
        self._frame = int(frame)
        self._pose(self._frame)
        if not from_gui and int(self._gui_frame.value) != self._frame:
            self._gui_frame.value = self._frame
        self._gui_time.value = f"{self._frame * self.trace.dt:.2f} / {(self.trace.frames - 1) * self.trace.dt:.2f} s"

    def _set_playing(self, playing: bool) -> None:
        self._playing = bool(playing)
        self._gui_play.label = "Pause" if self._playing else "Play"

    def _play_loop(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            period = max(self.trace.dt / self._speed, _MIN_PERIOD_S)
            self._stop.wait(max(0.0, period - (time.monotonic() - last)))
            now = time.monotonic()
            advance = max(1, int((now - last) * self._speed / self.trace.dt)) if self.trace.dt > 0 else 1
            last = now
            with self._lock:
                if not self._playing or self.trace.frames < 2:
                    continue
                frame = self._frame + advance
                if frame >= self.trace.frames:
                    if not self.loop:
                        self._set_frame(self.trace.frames - 1)
                        self._set_playing(False)
                        continue
                    frame %= self.trace.frames
                self._set_frame(frame)

    # --- control panel ------------------------------------------------------------------------------------------
    def _build_gui(self) -> None:
        gui, t = self.server.gui, self.trace
        gui.add_markdown(f"**{t.title}**  \n{len(t.envs)} env(s), {t.frames} frame{'' if t.frames == 1 else 's'}, "
                         f"{t.dt * 1000:.0f} ms each")
        labels = [e.label for e in t.envs]
        if len(set(labels)) != len(labels):
            for i, e in enumerate(t.envs):
                e.label = f"{i}: {e.label}"
            labels = [e.label for e in t.envs]
        self._gui_env = gui.add_dropdown("env", labels, initial_value=labels[0], disabled=len(labels) < 2)
        self._gui_frame = gui.add_slider("frame", min=0, max=max(t.frames - 1, 1), step=1, initial_value=0,
                                         disabled=t.frames < 2)
        self._gui_time = gui.add_text("time", initial_value=f"0.00 / {(t.frames - 1) * t.dt:.2f} s", disabled=True)
        self._gui_play = gui.add_button("Pause" if self._playing else "Play")
        self._gui_speed = gui.add_dropdown("speed", SPEEDS, initial_value="1")
        self._gui_robot = gui.add_checkbox("robot", initial_value=True)
        self._gui_markers = gui.add_checkbox("markers", initial_value=True)

        @self._gui_env.on_update
        def _(_event) -> None:
            with self._lock:
                env = labels.index(self._gui_env.value)
                if env != self._env:
                    self._build_env(env)

        @self._gui_frame.on_update
        def _(_event) -> None:
            with self._lock:
                if int(self._gui_frame.value) != self._frame:
                    self._set_frame(int(self._gui_frame.value), from_gui=True)

        @self._gui_play.on_click
        def _(_event) -> None:
            with self._lock:
                if not self._playing and self._frame >= self.trace.frames - 1:
                    self._set_frame(0)
                self._set_playing(not self._playing)

        @self._gui_speed.on_update
        def _(_event) -> None:
            self._speed = float(self._gui_speed.value)

        @self._gui_robot.on_update
        def _(_event) -> None:
            with self._lock:
                self._set_robot_visible(self._gui_robot.value)

        @self._gui_markers.on_update
        def _(_event) -> None:
            with self._lock:
                self._set_markers_visible(self._gui_markers.value)
