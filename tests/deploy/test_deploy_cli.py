"""``sim2real deploy`` refuses policies that do not fit the robot or are damaged: one ``error:`` line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

from sim2real.cli import main
from sim2real.configs import load_robot
from sim2real.policies.artefact.metadata import METADATA_FILE, ONNX_FILE
from sim2real.configs.durable import sha256_file

ROBOT = load_robot("crazyflie2")


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


def robot_yaml(tmp_path, **changes) -> str:
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(dict(ROBOT, **changes)))
    return str(path)


def test_cli_refuses_a_policy_trained_for_another_mass(tmp_path, linear_policy):
    policy = linear_policy(np.zeros((22, 4)), np.zeros(4))
    proc = subprocess.run(
        [sys.executable, "-m", "sim2real", "deploy", "--policy", str(policy), "--robot",
         robot_yaml(tmp_path, mass=0.031), "--activate", "--duration", "1"],
        capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert proc.returncode == 2, proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert "robot.params.mass" in lines[0] and "0.031" in lines[0] and "0.027" in lines[0]
    assert "Traceback" not in proc.stderr


def test_cli_refuses_a_policy_for_a_robot_of_another_name(tmp_path, linear_policy, capsys):
    policy = linear_policy(np.zeros((22, 4)), np.zeros(4))
    code = main(["deploy", "--policy", str(policy), "--robot", robot_yaml(tmp_path, name="crazyflie2-brushless"),
                 "--activate"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(error_lines(err)) == 1 and "robot.name" in err and "crazyflie2-brushless" in err


def test_cli_refuses_a_corrupt_onnx_file(tmp_path, linear_policy, capsys):
    policy = linear_policy(np.zeros((22, 4)), np.zeros(4))
    (policy / ONNX_FILE).write_bytes(b"\x08\x07garbage" * 10)
    code = main(["deploy", "--policy", str(policy), "--robot", "crazyflie2", "--activate"])
    err = capsys.readouterr().err
    assert code == 2 and len(error_lines(err)) == 1
    assert "onnx.sha256" in err  # the checksum catches it first


def test_cli_refuses_an_unloadable_onnx_file_even_with_a_matching_checksum(tmp_path, linear_policy, capsys):
    policy = linear_policy(np.zeros((22, 4)), np.zeros(4))
    (policy / ONNX_FILE).write_bytes(b"not an onnx model")
    meta = json.loads((policy / METADATA_FILE).read_text())
    meta["onnx"]["sha256"] = sha256_file(policy / ONNX_FILE)
    (policy / METADATA_FILE).write_text(json.dumps(meta))
    code = main(["deploy", "--policy", str(policy), "--robot", "crazyflie2", "--activate"])
    err = capsys.readouterr().err
    assert code == 2 and len(error_lines(err)) == 1
    assert "onnx.file" in err and str(policy / ONNX_FILE) in err  # unparseable model, named by field and path


def test_cli_refuses_a_missing_policy_and_unknown_robot(tmp_path, linear_policy, capsys):
    assert main(["deploy", "--policy", str(tmp_path / "nope"), "--robot", "crazyflie2"]) == 2
    assert "policy refused: policy: folder not found" in capsys.readouterr().err
    policy = linear_policy(np.zeros((22, 4)), np.zeros(4))
    assert main(["deploy", "--policy", str(policy), "--robot", "no-such-robot"]) == 2
    assert "unknown robot 'no-such-robot'" in capsys.readouterr().err


def test_cli_passes_sim_time_to_a_finetuning_node(tmp_path, monkeypatch, capsys):
    """``deploy --finetune S --sim-time`` (a rehearsal in lockstep with a stand-in) builds the FinetuneNode with
    ``sim_time``; without the flag, on the robot's clock."""
    from pathlib import Path

    import sim2real
    from sim2real.deploy.finetune import node as finetune_node
    from sim2real.deploy.finetune.runner import open_session

    pretrained = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadrotor-hover"
    session, _ = open_session(tmp_path / "session", pretrained, resume=False, overrides=[])
    seen = []

    def fake_node(*args, **kwargs):
        seen.append(kwargs["sim_time"])
        raise ValueError("stopped by the test")

    monkeypatch.setattr(finetune_node, "FinetuneNode", fake_node)
    for flags in (["--sim-time"], []):
        assert main(["deploy", "--finetune", str(session.path), "--robot", "crazyflie2", "--no-record"] + flags) == 2
        assert error_lines(capsys.readouterr().err) == ["error: stopped by the test"]
    assert seen == [True, False]


def test_cli_rejects_non_finite_goal(capsys):
    assert main(["deploy", "--policy", "p", "--robot", "crazyflie2", "--goal", "0", "nan", "1"]) == 2
    err = error_lines(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith("error: sim2real deploy: argument --goal: ") and "must be finite" in err[0]


def test_cli_parser_does_not_import_ros():
    code = ("import sys; from sim2real.cli import build_parser; p = build_parser(); "
            "p.parse_args(['deploy', '--policy', 'x', '--robot', 'y', '--goal', '1', '2', '3']); "
            "p.parse_args(['standin', '--mass-scale', '1.1']); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rclpy', 'nav_msgs', 'std_msgs')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_ctrl_c_idles_the_motors_and_exits_cleanly(tmp_path, linear_policy, ros_ctx, namespace):
    """``sim2real deploy --activate`` flies (fixed command 0.75 from a constant policy); Ctrl-C (SIGINT) publishes
    the safe command once, shuts down and exits 0."""
    import signal
    import time

    from nav_msgs.msg import Odometry
    from std_msgs.msg import Float32MultiArray

    from sim2real.deploy.ros_runtime import BackgroundSpin
    from ros_helpers import TopicRecorder, wait_until

    policy = linear_policy(np.zeros((22, 4)), [0.5] * 4)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim2real", "deploy", "--policy", str(policy), "--robot", "crazyflie2",
         "--namespace", namespace, "--activate", "--goal", "0", "0", "1", "--duration", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rec = TopicRecorder("cli_probe", {f"{namespace}/cmd/motors": Float32MultiArray}, context=ros_ctx)
    odom = Odometry()
    odom.pose.pose.orientation.w = 1.0
    pub = rec.publisher(f"{namespace}/odom", Odometry)
    rec.create_timer(0.01, lambda: pub.publish(odom))
    topic = f"{namespace}/cmd/motors"
    try:
        with BackgroundSpin(ros_ctx, rec):
            assert wait_until(lambda: rec.count(topic) and list(rec.last(topic)[1].data) == [0.75] * 4, 40.0)
            t_int = time.monotonic()
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=15)
            assert proc.returncode == 0, out
            assert wait_until(lambda: list(rec.last(topic)[1].data) == [0.0] * 4, 2.0)
            assert rec.last(topic)[0] >= t_int
            assert "control stopped: safe command published" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        rec.destroy_node()
