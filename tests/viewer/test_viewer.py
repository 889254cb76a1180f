"""``sim2real view``: rollouts and recorded sessions recorded for the viewer, its command line, and the viewer itself
in a real headless Chromium (software WebGL): a screenshot must show the robot's geometry where the camera looks."""

from __future__ import annotations

import io
import time
from pathlib import Path

import numpy as np
import pytest

from sim2real.configs import ConfigError

REPO = Path(__file__).resolve().parents[2]
PRETRAINED = REPO / "policies" / "pretrained"


def _policy(task: str):
    from sim2real.policies.loading import load_policy

    return load_policy(task=None, policy_dir=PRETRAINED / task)


# --- recording a rollout -------------------------------------------------------------------------------------------
def test_a_hover_rollout_records_every_env_and_its_goal():
    from sim2real.viewer.rollout import record_rollout

    policy, cfg = _policy("quadrotor-hover")
    trace = record_rollout(cfg, policy, num_envs=3, seconds=2.0)
    assert trace.frames == 201 and trace.dt == pytest.approx(0.01) and len(trace.envs) == 3
    for e in trace.envs:
        assert e.xpos.shape == (201, e.model.nbody, 3)
        goal, pole = e.markers  # (the goal's pole: see tests/viewer/test_markers.py)
        assert (goal.marker.name, pole.marker.name) == ("goal", "pole/goal") and goal.visible.all()
        # the shipped policy flies to its goal (the drone's body, posed from the env's state, ends there)
        error = np.linalg.norm(e.xpos[:, 1] - goal.pos, axis=1)
        assert error[-1] < 0.1 and error[-1] < error[0]


def test_a_swarm_scene_is_a_room_of_drones_with_goals_and_columns():
    from sim2real.viewer.rollout import record_rollout

    policy, cfg = _policy("quadrotor-swarm")
    trace = record_rollout(cfg, policy, num_envs=1, seconds=0.1)
    (room,) = trace.envs
    m = int(cfg["eval"]["num_drones"])
    assert room.model.nq == 7 * m and room.xpos.shape[1] == m + 1
    names = [tr.marker.name for tr in room.markers]
    assert [n for n in names if n.startswith("goal/")] == [f"goal/{i}" for i in range(m)]
    assert any(n.startswith("column/") for n in names) and room.label.startswith("room 0")


def test_the_swarms_drones_are_drawn_with_a_halo_and_its_walls_as_edges():
    """A 10 cm drone in a 10 m room is a speck: each is drawn inside a translucent halo of its colour (drawing only:
    the task collides at its drone radius); the room's translucent walls are drawn as their edges, so that they hide
    no halo or goal behind them in the browser. Other tasks' markers stay surfaces."""
    from sim2real.tasks import make_env, task_config
    from sim2real.tasks.quadrotor_swarm.markers import drone_colours, markers
    from sim2real.tasks.quadrotor_swarm.view import HALO_M, SwarmView
    from sim2real.viewer.server import box_edges, drawn_as_edges

    cfg = task_config("quadrotor-swarm", ["eval.num_drones=4"])
    env = make_env(cfg, num_envs=1, eval_mode=True)
    model = SwarmView(env).model
    assert env.room.drone_radius == cfg["world"]["drone_radius"] < HALO_M
    for i, colour in enumerate(drone_colours(4)):
        halo = model.geom(f"halo{i}")
        assert model.geom_bodyid[halo.id] == model.body(f"drone{i}").id and halo.size[0] == pytest.approx(HALO_M)
        np.testing.assert_allclose(halo.rgba[:3], colour, atol=1e-3)
        assert 0 < halo.rgba[3] < 1
    (room,) = markers(env)
    assert sorted(m.name for m in room if drawn_as_edges(m)) == [f"wall/{k}" for k in range(4)]
    edges = box_edges((5.0, 0.02, 1.5))
    assert edges.shape == (12, 2, 3)
    assert sorted(np.round(np.abs(edges[:, 1] - edges[:, 0]).sum(-1), 3)) == [0.04] * 4 + [3.0] * 4 + [10.0] * 4
    from sim2real.sim.markers import LEFT_RGBA, TARGET_RGBA, Marker

    assert not any(drawn_as_edges(m) for m in (
        Marker("goal", "sphere", (0.07,), TARGET_RGBA, (0, 0, 1)), Marker("s", "box", (0.1, 0.05, 0.01), LEFT_RGBA,
                                                                            (0, 0, 0)),
        Marker("column/0", "cylinder", (0.2, 1.5), (0.5, 0.5, 0.5, 1.0), (0, 0, 1.5))))


def test_a_humanoid_scene_shows_its_plans_footsteps_and_target():
    import torch

    from sim2real.tasks import task_config
    from sim2real.viewer.rollout import record_rollout

    cfg = dict(task_config("humanoid-footsteps"), device="cpu")
    num_actions = len(cfg["robot"]["joint_names"])
    trace = record_rollout(cfg, lambda obs: torch.zeros(obs.shape[0], num_actions), num_envs=2, seconds=0.1)
    assert trace.frames == 5 and len(trace.envs) == 2
    for e in trace.envs:
        names = [tr.marker.name for tr in e.markers]
        steps = [n for n in names if n.startswith("step/")]
        assert len(steps) >= 2 and "target" in names
        assert e.model.ngeom > 20 and e.xpos.shape == (5, e.model.nbody, 3)


def test_a_task_without_a_view_or_on_another_backend_is_refused_in_one_line():
    from sim2real.viewer.rollout import record_rollout

    from sim2real.tasks import register_task_folder

    register_task_folder(REPO / "tests" / "fixtures" / "point_mass_task")
    with pytest.raises(ConfigError, match="point-mass declares no scene view"):
        record_rollout({"task": "point-mass"}, None)
    with pytest.raises(ConfigError, match="--sim mujoco"):
        record_rollout({"task": "quadruped-jump", "sim": {"backend": "mujoco-warp"}}, None)


# --- a recorded session --------------------------------------------------------------------------------------------
def _write_go2_recording(folder: Path, frames: int = 26) -> None:
    from geometry_msgs.msg import PoseStamped
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import JointState

    from sim2real.deploy.recording.topics import TopicRecorder

    t0 = 1_700_000_000_000_000_000
    with TopicRecorder(folder) as rec:
        goal = PoseStamped()
        goal.pose.position.x = 1.0
        rec.write("/go2/finetune/goal", goal, t0 + 10_000_000)
        for i in range(frames):
            odom = Odometry()
            odom.pose.pose.position.x, odom.pose.pose.position.z = 0.02 * i, 0.3
            odom.pose.pose.orientation.w = 1.0
            rec.write("/go2/odom", odom, t0 + i * 20_000_000)
            rec.write("/go2/joint_states", JointState(name=["FL_hip_joint", "not_a_joint"], position=[0.5, 9.0]),
                      t0 + i * 20_000_000 + 1)


def test_a_recorded_session_is_posed_by_forward_kinematics(tmp_path):
    import mujoco

    from sim2real.viewer.recording import record_session

    _write_go2_recording(tmp_path)
    trace = record_session(tmp_path, robot="go2")
    (e,) = trace.envs
    assert trace.frames == 26 and trace.dt == pytest.approx(0.02)
    base = mujoco.mj_name2id(e.model, mujoco.mjtObj.mjOBJ_BODY, "base")
    assert np.allclose(e.xpos[:, base], np.stack([0.02 * np.arange(26), np.zeros(26), np.full(26, 0.3)], 1),
                       atol=1e-5)
    # the recorded hip angle turned the FL hip body about x (the model's qpos0 leaves it at 0)
    hip = mujoco.mj_name2id(e.model, mujoco.mjtObj.mjOBJ_BODY, "FL_hip")
    roll = 2 * np.arctan2(e.xquat[5, hip, 1], e.xquat[5, hip, 0])
    assert roll == pytest.approx(0.5, abs=1e-4)
    (goal,) = e.markers
    assert list(goal.visible[:2]) == [False, True] and np.allclose(goal.pos[-1], [1.0, 0.0, 0.0])


def test_a_fine_tuning_session_is_drawn_with_its_base_policys_robot(tmp_path):
    from nav_msgs.msg import Odometry

    from sim2real.deploy.finetune.session import FinetuneSession
    from sim2real.deploy.recording.topics import TopicRecorder
    from sim2real.viewer.recording import record_session

    session = FinetuneSession.create(tmp_path / "session", PRETRAINED / "quadrotor-hover", task="quadrotor-hover",
                                     robot_name="crazyflie2", config={})
    t0 = 1_700_000_000_000_000_000
    with TopicRecorder(session.recordings_dir) as rec:
        for i in range(11):
            odom = Odometry()
            odom.pose.pose.position.z = 0.1 * i
            odom.pose.pose.orientation.w = 1.0
            rec.write("/crazyflie/odom", odom, t0 + i * 100_000_000)  # 10 Hz: frames hold the latest pose
    trace = record_session(session.path)
    (e,) = trace.envs
    assert trace.title == "quadrotor-hover session session" and trace.frames == 51
    assert np.allclose(e.xpos[:, 1, 2], 0.1 * np.floor(np.arange(51) / 5 + 1e-6), atol=1e-6)
    with pytest.raises(ConfigError, match="names its own robot"):
        record_session(session.path, robot="go2")


def test_a_finetune_run_session_is_refused_saying_what_it_holds(tmp_path):
    """``finetune run`` (the stand-in) records transitions only, no robot topics: the error says what was looked
    for, what the folder holds and which sessions record the topics."""
    from sim2real.deploy.finetune.session import FinetuneSession
    from sim2real.deploy.recording.transitions import TransitionRecorder
    from sim2real.viewer.recording import record_session

    session = FinetuneSession.create(tmp_path / "s", PRETRAINED / "quadrotor-hover", task="quadrotor-hover",
                                     robot_name="crazyflie2", config={})
    with TransitionRecorder(session.recordings_dir, {"obs": 3, "reward": 1}) as rec:
        rec.append({"obs": [0.0, 0.0, 0.0], "reward": [1.0]})
    with pytest.raises(FileNotFoundError) as exc:
        record_session(session.path)
    assert str(exc.value) == (
        f"view --recording: no topics-*.mcap (the robot's topics) in {session.recordings_dir}: it holds 1 "
        f"transitions-*.mcap (what 'sim2real finetune run' records: the policy's observations and actions, no robot "
        f"poses to draw); the robot's topics are recorded by 'sim2real deploy --finetune' on ROS 2")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"no topics-\*\.mcap .* in .*other: it holds notes.txt$"):
        record_session(tmp_path / "other", robot="go2")


def test_a_recording_of_another_robot_is_drawn_with_a_warning(tmp_path, capsys):
    from nav_msgs.msg import Odometry

    from sim2real.deploy.recording.topics import TopicRecorder
    from sim2real.viewer.recording import record_session

    drone = tmp_path / "drone"
    with TopicRecorder(drone) as rec:  # a drone's recording: odometry, no joint states
        for i in range(3):
            odom = Odometry()
            odom.pose.pose.orientation.w = 1.0
            rec.write("/crazyflie/odom", odom, 1_700_000_000_000_000_000 + i * 20_000_000)
    capsys.readouterr()
    assert record_session(drone, robot="crazyflie2").frames == 3
    assert capsys.readouterr().err == ""
    assert record_session(drone, robot="go2").frames == 3
    assert capsys.readouterr().err.splitlines() == [
        "warning: view --recording: it holds no sensor_msgs/msg/JointState messages: go2's 12 joints stay in their "
        "default pose; a recording of another robot? (--robot names the robot)"]
    go2 = tmp_path / "go2"
    _write_go2_recording(go2, frames=3)
    record_session(go2, robot="go2")
    assert capsys.readouterr().err == ""  # (one of the recorded names is not go2's: fine)
    record_session(go2, robot="crazyflie2")
    assert capsys.readouterr().err.splitlines() == [
        "warning: view --recording: its joint states name joints (FL_hip_joint, not_a_joint) and crazyflie2 has "
        "none; a recording of another robot? (--robot names the robot)"]


def test_a_recording_needs_its_robot_and_odometry(tmp_path):
    from sim2real.viewer.recording import record_session

    with pytest.raises(FileNotFoundError, match="no topics-"):
        record_session(tmp_path, robot="go2")
    with pytest.raises(ConfigError, match="name the robot with --robot"):
        record_session(tmp_path)
    from sensor_msgs.msg import JointState

    from sim2real.deploy.recording.topics import TopicRecorder

    with TopicRecorder(tmp_path) as rec:
        rec.write("/go2/joint_states", JointState(name=["FL_hip_joint"], position=[0.1]), 1_700_000_000_000_000_000)
    with pytest.raises(ConfigError, match="no nav_msgs/msg/Odometry"):
        record_session(tmp_path, robot="go2")


# --- the server, without a browser ---------------------------------------------------------------------------------
def test_the_server_plays_pauses_seeks_and_switches_envs():
    from sim2real.sim.scene import Marker, TraceRecorder, quadrotor_model
    from sim2real.viewer.server import SceneViewer, camera_for

    model = quadrotor_model({})
    rec = TraceRecorder([model, model], ["a", "b"])
    for t in range(100):
        x = 0.01 * t
        rec.add([[x, 0, 1, 1, 0, 0, 0], [0, x, 1, 1, 0, 0, 0]],
                [[Marker("goal", "sphere", (0.02,), (0, 1, 0, 1), (1.0, 0.0, 1.0))], []])
    trace = rec.trace("test", 0.01)
    position, look_at = camera_for(trace, env=0, frame=99)
    assert np.allclose(look_at, [0.995, 0.0, 1.0], atol=1e-3) and np.linalg.norm(position - look_at) < 1.0
    with SceneViewer(trace, port=0, playing=True) as viewer:
        assert viewer.url.startswith("http://127.0.0.1:") and viewer.clients() == 0
        deadline = time.monotonic() + 10.0
        while viewer._frame == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        viewer.show(playing=False)
        frame = viewer._frame
        assert frame > 0  # it played
        time.sleep(0.2)  # (nothing to wait for: the playback thread would advance the frame within a period)
        assert viewer._frame == frame  # and paused
        viewer.show(env=1, frame=42)
        assert (viewer._env, viewer._frame, viewer._gui_frame.value, viewer._gui_env.value) == (1, 42, 42, "b")
        body = viewer._bodies[1]
        assert np.allclose(body.position, trace.envs[1].xpos[42, 1]) and np.allclose(body.wxyz, [1, 0, 0, 0])
        with pytest.raises(IndexError, match="frame 100 out of range"):
            viewer.show(frame=100)
        with pytest.raises(IndexError, match="env 2 out of range"):
            viewer.show(env=2)


def _tiny_trace(frames: int = 1):
    from sim2real.sim.scene import TraceRecorder, quadrotor_model

    rec = TraceRecorder([quadrotor_model({})], ["a"])
    for _ in range(frames):
        rec.add([[0, 0, 1, 1, 0, 0, 0]], [[]])
    return rec.trace("tiny", 0.01)


def test_an_address_that_cannot_be_served_on_is_refused_and_a_busy_port_moves_on():
    """viser takes any bind error for a busy port and never reports back: the viewer binds a plain socket first."""
    import socket
    import threading

    from sim2real.viewer.server import SceneViewer, check_bindable

    outcome = []

    def serve():  # (in a thread: without the check, viser waits forever)
        try:
            SceneViewer(_tiny_trace(), host="203.0.113.5", port=0).stop()  # TEST-NET-3: never this machine's
            outcome.append("served")
        except ConfigError as exc:
            outcome.append(str(exc))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert outcome == ["view --host 203.0.113.5 --port 0: cannot serve there: Cannot assign requested address "
                       "(203.0.113.5 is not an address of this machine; --host 0.0.0.0 serves on every interface)"]
    with pytest.raises(ConfigError, match="^view --host no.such.host.invalid --port 8080: cannot resolve"):
        check_bindable("no.such.host.invalid", 8080)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        check_bindable("127.0.0.1", port)  # in use: viser moves on to the next free port
        with SceneViewer(_tiny_trace(), port=port, playing=False) as viewer:
            assert viewer.server.get_port() > port


def test_view_refuses_an_address_it_cannot_serve_on_before_the_rollout(monkeypatch, capsys):
    from sim2real.cli import main

    def rollout(*_):
        raise AssertionError("rolled out before checking the address")

    monkeypatch.setattr("sim2real.viewer.command._trace", rollout)
    assert main(["view", "--policy", str(PRETRAINED / "quadrotor-hover"), "--host", "203.0.113.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: view --host 203.0.113.5 --port 8080: cannot serve there: Cannot assign requested address "
                   "(203.0.113.5 is not an address of this machine; --host 0.0.0.0 serves on every interface)"]


def test_ctrl_c_at_any_point_of_start_up_exits_quietly_with_130(monkeypatch, capsys):
    """Ctrl-C while the command line's modules import (seconds: torch, onnx, viser) or while the viewer sends its
    scene: status 130 and one line, no traceback, and no server left running."""
    from sim2real import cli
    from sim2real.viewer.server import SceneViewer

    def interrupt(*_):
        raise KeyboardInterrupt

    def main(argv):
        try:
            return cli.main(argv)
        except KeyboardInterrupt:
            pytest.fail("Ctrl-C escaped main() (a traceback)")

    with monkeypatch.context() as m:
        m.setattr(cli, "build_parser", interrupt)  # (the first thing main does: its imports)
        assert main(["view", "--policy", str(PRETRAINED / "quadrotor-hover")]) == 130
    assert capsys.readouterr().err == "\ninterrupted\n"
    servers = []

    def build_env(self, env):
        servers.append(self.server)
        raise KeyboardInterrupt

    monkeypatch.setattr(SceneViewer, "_build_env", build_env)
    monkeypatch.setattr("sim2real.viewer.command._trace", lambda args, policy_fn: _tiny_trace())
    assert main(["view", "--port", "0"]) == 130
    captured = capsys.readouterr()
    assert captured.err == "\ninterrupted\n" and captured.out == ""  # (nor viser's "Server stopped")
    (server,) = servers
    assert not server._websock_server._server_thread.is_alive()


# --- command line --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--recording", "{tmp}", "--task", "quadrotor-hover"], "--task apply to rollouts"),
    (["--policy", str(PRETRAINED / "quadrotor-hover"), "--at", "1"], "--at applies with --screenshot"),
    (["--policy", str(PRETRAINED / "quadrotor-hover"), "--robot", "go2"], "--robot applies with --recording"),
    (["--policy", str(PRETRAINED / "quadrotor-hover"), "--screenshot", "{tmp}/x.txt"], "a screenshot is written as "
                                                                                     "PNG: name it <file>.png"),
    (["--policy", str(PRETRAINED / "quadrotor-hover"), "--screenshot", str(Path(__file__)) + "/x.png"],
     "test_viewer.py is a file, not a folder"),
    (["--policy", str(PRETRAINED / "quadrotor-hover"), "--screenshot", "{tmp}/x.png", "--at", "nan"],
     "--at nan: a moment of the rollout in seconds"),
])
def test_view_refuses_flags_that_do_not_go_together_in_one_line(tmp_path, capsys, argv, message):
    from sim2real.cli import main

    assert main(["view", *[a.format(tmp=tmp_path) for a in argv]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_view_screenshot_makes_its_folder_and_says_when_at_is_outside_the_rollout(tmp_path, monkeypatch, capsys):
    """As play --output does, --screenshot makes missing folders; an --at outside the rollout shows its first or
    last frame with a warning naming the moment shown (a stand-in browser: the PNG it returns is written)."""
    from sim2real.cli import main

    shown = []

    class Browser:
        def __init__(self, size):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def navigate(self, url):
            pass

        def settled_screenshot(self, **kwargs):
            return b"\x89PNG fake"

        def evaluate(self, expression):
            pass

    monkeypatch.setattr("sim2real.viewer.browser.HeadlessChromium", Browser)
    monkeypatch.setattr("sim2real.viewer.browser.find_chromium", lambda: "/usr/bin/chromium")  # (none needed)
    monkeypatch.setattr("sim2real.viewer.command._trace", lambda args, policy_fn: _tiny_trace(frames=101))
    monkeypatch.setattr("sim2real.viewer.server.SceneViewer.show", lambda self, frame, **kw: shown.append(frame))
    out = tmp_path / "new" / "folder" / "shot.png"
    for at, frame, warning in ((None, 50, None), (0.3, 30, None), (5.0, 100, "t = 1.00 s"), (-1.0, 0, "t = 0.00 s")):
        assert main(["view", "--port", "0", "--screenshot", str(out), *(["--at", str(at)] if at is not None else [])
                     ]) == 0
        captured = capsys.readouterr()
        assert out.read_bytes() == b"\x89PNG fake" and shown[-1] == frame
        assert captured.out.strip() == f"wrote {out} (tiny, t = {frame * 0.01:.2f} s)"
        err = captured.err.strip().splitlines()
        assert err == ([] if warning is None else [
            f"warning: view --at {at:g}: the rollout spans 0-1.00 s; showing {warning}"])
    out.unlink()
    Browser.navigate = lambda self, url: (_ for _ in ()).throw(KeyboardInterrupt)  # Ctrl-C while the page loads
    assert main(["view", "--port", "0", "--screenshot", str(out)]) == 130
    assert capsys.readouterr().err == "\ninterrupted\n" and not out.exists()


@pytest.mark.parametrize("value, what", [
    ("/no/such/chromium", "does not exist"),
    (__file__, "is not executable"),
    (str(REPO), "is a folder"),
    ("no-such-browser-on-path", "is not on PATH"),
])
def test_a_bad_sim2real_chromium_is_refused_naming_the_variable(tmp_path, monkeypatch, capsys, value, what):
    """Not passed over silently for the system's Chromium: the user asked for this one."""
    from sim2real.cli import main
    from sim2real.viewer.browser import BrowserError, find_chromium

    monkeypatch.setenv("SIM2REAL_CHROMIUM", value)
    with pytest.raises(BrowserError, match=f"^SIM2REAL_CHROMIUM={value}: {what} "):
        find_chromium()

    def rollout(*_):
        raise AssertionError("rolled out before finding the browser")

    monkeypatch.setattr("sim2real.viewer.command._trace", rollout)
    assert main(["view", "--policy", str(PRETRAINED / "quadrotor-hover"), "--screenshot", str(tmp_path / "x.png")]
                ) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: view --screenshot: SIM2REAL_CHROMIUM={value}: {what} (name Chromium's executable, or unset it to "
        f"use the system's)"]


# --- the viewer in a real browser ----------------------------------------------------------------------------------
def _chromium():
    from sim2real.viewer.browser import find_chromium

    if find_chromium() is None:
        pytest.skip("no Chromium (Debian's chromium package; .ci/run installs it)")


def _rgb(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


#: Screen boxes ``(x0, y0, x1, y1)`` [px] of a 960 x 640 page that viser's overlays cover, left out of every pixel
#: comparison: its notification (top left: "Software WebGL rendering detected" under headless Chromium's software
#: WebGL, shown and closed at moments of its own: in two runs of the whole suite it came between two screenshots
#: and counted 2,690 "drone" pixels) and the minimised control panel (top right).
OVERLAYS = ((0, 0, 330, 170), (610, 0, 960, 70))


def robot_pixels(shown: np.ndarray, hidden: np.ndarray) -> np.ndarray:
    """``[H, W]`` bool: where the screenshot with the robot differs from the one without it (viser's overlays,
    :data:`OVERLAYS`, left out)."""
    changed = np.abs(shown - hidden).max(axis=-1) > 24
    for x0, y0, x1, y1 in OVERLAYS:
        changed[y0:y1, x0:x1] = False
    return changed


def _changed_screenshot(browser, before: bytes, timeout: float = 20.0) -> bytes:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and browser.screenshot() == before:
        time.sleep(0.2)
    return browser.settled_screenshot(min_wait_s=0.3, timeout=timeout)


@pytest.mark.slow
def test_the_browser_shows_the_robot_geometry_where_the_camera_looks():
    """A Go2 mid-jump in headless Chromium: the pixels that change when the robot is hidden form a robot-sized blob
    around the point the camera looks at, and hold the robot's dark leg colour where the hidden view shows floor.
    A blank canvas (no WebGL, nothing sent) fails this: nothing changes."""
    _chromium()
    from sim2real.viewer.browser import HeadlessChromium
    from sim2real.viewer.rollout import record_rollout
    from sim2real.viewer.server import SceneViewer

    policy, cfg = _policy("quadruped-jump")
    trace = record_rollout(cfg, policy, num_envs=2, seconds=1.0)
    assert trace.frames == 51 and len(trace.envs) == 2
    width, height = 960, 640
    started = time.perf_counter()
    with SceneViewer(trace, port=0, playing=False) as viewer:
        viewer.show(env=1, frame=25)
        viewer.aim_camera()
        viewer.server.gui.main_panel.minimize()  # the panel's "robot" checkbox would change pixels too
        print(f"viewer started in {time.perf_counter() - started:.2f} s at {viewer.url}")
        with HeadlessChromium((width, height)) as browser:
            browser.navigate(viewer.url)
            shown_png = browser.settled_screenshot(min_wait_s=1.0, timeout=60.0, ready=lambda: viewer.clients() > 0)
            viewer.show(robot=False)
            hidden_png = _changed_screenshot(browser, shown_png)
            viewer.show(robot=True, markers=False)
            no_markers_png = _changed_screenshot(browser, hidden_png)
    shown, hidden, no_markers = _rgb(shown_png), _rgb(hidden_png), _rgb(no_markers_png)
    assert shown.shape == (height, width, 3)
    assert not robot_pixels(hidden, hidden).any()  # the check itself: no robot, no pixels
    robot = robot_pixels(shown, hidden)
    count = int(robot.sum())
    assert count > 0.005 * width * height, f"only {count} pixels changed when the robot was hidden"
    ys, xs = np.nonzero(robot)
    print(f"robot pixels: {count} ({100 * count / (width * height):.1f}% of the page), centre ({xs.mean():.0f}, "
          f"{ys.mean():.0f}) px, box {xs.max() - xs.min()} x {ys.max() - ys.min()} px")
    # the camera looks at the robot: its pixels sit around the canvas centre, and it is robot-sized, not the screen
    assert abs(xs.mean() - width / 2) < 0.2 * width and abs(ys.mean() - height / 2) < 0.2 * height
    assert xs.max() - xs.min() < 0.7 * width and ys.max() - ys.min() < 0.7 * height
    # the Go2's legs (rgba 0.25 0.25 0.28) are dark grey where the floor (0.55 0.6 0.65) is light
    lum_shown, lum_hidden = shown[robot].mean(-1), hidden[robot].mean(-1)
    dark = (lum_shown < 90) & (np.ptp(shown[robot], axis=-1) < 40)
    assert dark.sum() > 0.1 * count and (lum_hidden < 90).mean() < 0.05
    # the markers switch (the green landing disc) changes other pixels than the robot
    assert (robot_pixels(shown, no_markers) & ~robot).sum() > 100


@pytest.mark.slow
def test_the_browser_shows_every_drone_of_a_swarm_room(tmp_path):
    """A swarm room of 8 drones in headless Chromium, framed whole: the drones (their halos) cover some 200
    pixels each, not the few of a 10 cm drone 10 m away, and the room's walls hide none of them."""
    _chromium()
    from sim2real.viewer.browser import HeadlessChromium
    from sim2real.viewer.rollout import record_rollout
    from sim2real.viewer.server import SceneViewer

    policy, cfg = _policy("quadrotor-swarm")
    trace = record_rollout(cfg, policy, num_envs=1, seconds=6.0)
    m = int(cfg["eval"]["num_drones"])
    width, height = 960, 640
    with SceneViewer(trace, port=0, playing=False) as viewer:
        viewer.show(env=0, frame=trace.frames - 1)
        viewer.aim_camera()
        viewer.server.gui.main_panel.minimize()
        with HeadlessChromium((width, height)) as browser:
            browser.navigate(viewer.url)
            shown_png = browser.settled_screenshot(min_wait_s=1.0, timeout=90.0, ready=lambda: viewer.clients() > 0)
            viewer.show(robot=False)
            hidden_png = _changed_screenshot(browser, shown_png)
            viewer.show(markers=False)
            bare_png = _changed_screenshot(browser, hidden_png)
            viewer.show(robot=True)
            alone_png = _changed_screenshot(browser, bare_png)
    for name, png in (("shown", shown_png), ("hidden", hidden_png), ("bare", bare_png), ("alone", alone_png)):
        (tmp_path / f"{name}.png").write_bytes(png)  # kept for a failure's diagnosis
    shown, hidden, bare, alone = (_rgb(p) for p in (shown_png, hidden_png, bare_png, alone_png))
    in_room = int(robot_pixels(shown, hidden).sum())  # the drones among the room's markers
    by_themselves = int(robot_pixels(alone, bare).sum())  # the drones alone
    print(f"drone pixels: {in_room} in the room, {by_themselves} alone ({m} drones)")
    assert by_themselves > 100 * m  # (without the halos: 36 pixels)
    # the walls hide none (drawn as surfaces they hid a quarter)
    assert in_room > 0.8 * by_themselves, f"{in_room} drone pixels in the room, {by_themselves} alone: {tmp_path}"


@pytest.mark.slow
def test_view_screenshot_writes_a_png_of_the_scene(tmp_path, capsys):
    _chromium()
    from sim2real.cli import main

    out = tmp_path / "hover.png"
    started = time.perf_counter()
    assert main(["view", "--policy", str(PRETRAINED / "quadrotor-hover"), "--envs", "2", "--seconds", "1",
                 "--port", "0", "--screenshot", str(out), "--at", "0.8"]) == 0
    print(f"view --screenshot took {time.perf_counter() - started:.1f} s")
    assert f"wrote {out}" in capsys.readouterr().out
    image = _rgb(out.read_bytes())
    assert image.shape == (800, 1280, 3) and image.std() > 10  # a scene, not a blank page
