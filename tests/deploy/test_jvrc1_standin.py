"""The legged stand-in with JVRC-1 (the project's model and, through the robot config's mjcf override, the real
jvrc_mj_description model): the robot's own servos hold the held joints whatever the policy joints do,
joint_states lists every actuated joint in the model's motor order, and odom is the simulation's ground truth in
the ``odom`` frame."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import pytest
from nav_msgs.msg import Odometry
from sensor_msgs.msg import JointState

from sim2real.configs import load_robot
from sim2real.deploy.ros_runtime import BackgroundSpin
from ros_helpers import TopicRecorder, wait_until
from sim2real.hardware.standins.legged import SimLeggedNode

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SHARED = Path(os.environ.get("SIM2REAL_SHARED") or Path(__file__).resolve().parents[2].parent / "shared")
REAL_JVRC1 = SHARED / "robots" / "jvrc1" / "xml" / "scene.xml"
POLICY_ORDER = [f"{s}_{j}" for s in "LR" for j in ("HIP_P", "HIP_R", "HIP_Y", "KNEE", "ANKLE_R", "ANKLE_P")]
DEFAULT = {n: {"HIP_P": -0.3, "KNEE": 0.75, "ANKLE_P": -0.45}.get(n[2:], 0.0) for n in POLICY_ORDER}


def models():
    yield pytest.param(None, id="own-model")
    yield pytest.param(str(REAL_JVRC1), id="real-model", marks=pytest.mark.skipif(
        not REAL_JVRC1.is_file(), reason=f"real JVRC-1 model not found at {REAL_JVRC1}"))


@pytest.mark.parametrize("mjcf", models())
def test_jvrc1_standin_holds_its_held_joints_and_publishes_ground_truth_odom(ros_ctx, namespace, mjcf):
    robot = load_robot("jvrc1")
    if mjcf is not None:
        robot = dict(robot, mjcf=mjcf)  # the robot config's mjcf override
    with contextlib.ExitStack() as stack:
        node = SimLeggedNode(robot, namespace=namespace, context=ros_ctx, initial_pose="default")
        stack.callback(node.destroy_node)
        assert node.robot["mjcf"] == (mjcf or "sim/models/jvrc1/scene.xml")
        m, d, i = node.model, node.data, node.index
        held = list(i.held_joint_names)
        assert {"WAIST_Y", "NECK_P", "R_SHOULDER_R", "L_ELBOW_P"} <= set(held)
        # joint_states: policy + held joints, model motor order (JVRC-1 lists the right leg first).
        assert node.model_joint_names[:6] == POLICY_ORDER[6:] and len(node.model_joint_names) == m.nu
        assert set(node.model_joint_names) == set(POLICY_ORDER) | set(held)
        # Floating in zero gravity: a large policy command on the legs; the held joints stay at their pose.
        m.opt.gravity[:] = 0.0
        d.qpos[i.base_qpos:i.base_qpos + 7] = [0.0, 0.0, 1.5, 1.0, 0.0, 0.0, 0.0]
        d.qvel[:] = 0.0
        n = len(POLICY_ORDER)
        targets = {j: DEFAULT[j] + (0.4 if j.endswith("KNEE") else 0.2 if j.endswith("HIP_P") else 0.0)
                   for j in POLICY_ORDER}
        node._on_targets(JointState(name=POLICY_ORDER, position=[targets[j] for j in POLICY_ORDER],
                                    velocity=[0.0] * n, effort=[0.0] * n))
        node._on_gains(JointState(name=POLICY_ORDER, position=[200.0] * n, velocity=[10.0] * n))
        for _ in range(1500):  # 1.5 s: the legs' swing shakes the floating torso, then everything settles
            node.physics_step(node.targets_time)
        q = node.joint_positions()
        np.testing.assert_allclose([q[j] for j in POLICY_ORDER], [targets[j] for j in POLICY_ORDER], atol=0.03)
        held_q = np.array([d.qpos[m.jnt_qposadr[m.joint(h).id]] for h in held])
        np.testing.assert_allclose(held_q, i.held_joint_pos, atol=0.02)
        assert np.abs(i.held_joint_pos).max() > 0.1  # the arms' pose is not all zeros: held, not just left there
        # Ground truth odometry in the odom frame, and joint_states carrying the held joints.
        rec = TopicRecorder("probe", {f"{namespace}/odom": Odometry, f"{namespace}/joint_states": JointState},
                            context=ros_ctx)
        stack.callback(rec.destroy_node)
        with BackgroundSpin(ros_ctx, rec):
            assert wait_until(lambda: rec.count_publishers(f"{namespace}/odom") > 0, 5.0)
            import mujoco

            mujoco.mj_forward(m, d)

            def published() -> bool:
                node.publish_odometry()
                node.publish_sensors()
                return rec.count(f"{namespace}/odom") > 0 and rec.count(f"{namespace}/joint_states") > 0

            assert wait_until(published, 5.0, poll_s=0.05)
        odom = rec.last(f"{namespace}/odom")[1]
        assert (odom.header.frame_id, odom.child_frame_id) == ("odom", "base")
        p = odom.pose.pose.position
        np.testing.assert_allclose([p.x, p.y, p.z], d.qpos[i.base_qpos:i.base_qpos + 3], atol=1e-9)
        js = rec.last(f"{namespace}/joint_states")[1]
        assert list(js.name) == node.model_joint_names
        elbow = js.name.index("L_ELBOW_P")
        assert js.position[elbow] == pytest.approx(d.qpos[m.jnt_qposadr[m.joint("L_ELBOW_P").id]])


@pytest.mark.parametrize("gantry", ["auto", "off"])
def test_a_biped_hangs_in_its_gantry_until_the_first_command(ros_ctx, namespace, gantry):
    """Without commands the joints are in damping: on the gantry (auto for a biped) the pelvis stays where it
    stood; without one the humanoid collapses. The first command releases it."""
    node = SimLeggedNode(load_robot("jvrc1"), namespace=namespace, context=ros_ctx, initial_pose="default",
                         gantry=gantry)
    try:
        i, d = node.index, node.data
        z0 = float(d.qpos[i.base_qpos + 2])
        for _ in range(1500):  # 1.5 s in damping mode (no command yet)
            node.physics_step(0.0)
        z = float(d.qpos[i.base_qpos + 2])
        if gantry == "auto":
            assert node.gantry is not None and z == pytest.approx(z0, abs=1e-9)
            n = len(POLICY_ORDER)
            node._on_targets(JointState(name=POLICY_ORDER, position=[DEFAULT[j] for j in POLICY_ORDER],
                                        velocity=[0.0] * n, effort=[0.0] * n))
            node._on_gains(JointState(name=POLICY_ORDER, position=[200.0] * n, velocity=[10.0] * n))
            node.physics_step(node.targets_time)
            assert node.gantry is None                  # released: the base moves under physics from now on
        else:
            assert node.gantry is None and z < z0 - 0.2, (z0, z)
    finally:
        node.destroy_node()


@pytest.mark.parametrize("mjcf", models())
def test_jvrc1_standin_publishes_each_foots_normal_force_as_a_foot_wrench(ros_ctx, namespace, mjcf):
    """Standing on both feet under the policy's PD gains: foot_wrench/left and foot_wrench/right carry the feet's
    touch-sensor normal forces (training's foot_contact) in force.z, in the foot bodies' frames, summing to the
    robot's weight."""
    from geometry_msgs.msg import WrenchStamped

    robot = load_robot("jvrc1")
    if mjcf is not None:
        robot = dict(robot, mjcf=mjcf)
    with contextlib.ExitStack() as stack:
        node = SimLeggedNode(robot, namespace=namespace, context=ros_ctx, initial_pose="default", gantry="off")
        stack.callback(node.destroy_node)
        assert node.foot_topics == ["foot_wrench/left", "foot_wrench/right"]
        assert node.foot_frames == ["L_ANKLE_P_S", "R_ANKLE_P_S"]  # the robot config's foot bodies, left first
        n = len(POLICY_ORDER)
        node._on_targets(JointState(name=POLICY_ORDER, position=[DEFAULT[j] for j in POLICY_ORDER],
                                    velocity=[0.0] * n, effort=[0.0] * n))
        node._on_gains(JointState(name=POLICY_ORDER, position=list(node.legged.stiffness),
                                  velocity=list(node.legged.damping)))
        for _ in range(1000):  # 1 s standing in the default pose
            node.physics_step(node.targets_time)
        import mujoco

        m, d = node.model, node.data
        mujoco.mj_forward(m, d)
        forces = node.foot_forces()
        np.testing.assert_array_equal(forces, d.sensordata[node.index.foot_sensors])
        weight = float(m.body_subtreemass[node.index.base_body]) * 9.81
        assert forces.sum() == pytest.approx(weight, rel=0.05), (forces, weight)
        assert forces.min() > 0.3 * weight, forces  # both feet carry it
        topics = {f"{namespace}/{t}": WrenchStamped for t in node.foot_topics}
        rec = TopicRecorder("probe", topics, context=ros_ctx)
        stack.callback(rec.destroy_node)
        with BackgroundSpin(ros_ctx, rec):
            assert wait_until(lambda: all(rec.count_publishers(t) > 0 for t in topics), 5.0)

            def published() -> bool:
                node.publish_sensors()
                return all(rec.count(t) > 0 for t in topics)

            assert wait_until(published, 5.0, poll_s=0.05)
        for topic, frame, force in zip(topics, node.foot_frames, forces):
            msg = rec.last(topic)[1]
            assert msg.header.frame_id == frame
            w = msg.wrench
            assert (w.force.z, w.force.x, w.force.y, w.torque.x, w.torque.y, w.torque.z) == (force, 0, 0, 0, 0, 0)
