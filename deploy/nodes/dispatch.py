"""``sim2real deploy``: which node runs a policy, and the command's steps before it starts.

The node kind is the policy's task's (``get_task(metadata["task"]).deploy.node``, see
:class:`~sim2real.tasks.spec.DeploySpec`); :data:`NODE_ENTRIES` maps each kind to its entry point
``entry(args, robot) -> exit status``:
  * ``quadrotor``: :class:`~sim2real.deploy.nodes.quadrotor.PolicyNode` (one drone);
  * ``swarm``: :class:`~sim2real.deploy.nodes.swarm.SwarmPolicyNode` (``--drones``; also chosen by ``--drones``
    for a one-drone policy, which the swarm node then refuses naming the task);
  * ``legged``: :class:`~sim2real.deploy.nodes.legged.LeggedPolicyNode`.
``--finetune SESSION`` runs :func:`~sim2real.deploy.finetune.node.finetune_deploy_main` instead. A policy whose
metadata cannot be read goes to the robot kind's node (``legged`` or ``quadrotor``), whose validation names what
is wrong. Every kind runs inside a :class:`~sim2real.deploy.watch.session.DeployWatch`: the run recording
(``--record``, on by default) and the live view (``--viz``), fed from the node's topics.
"""

from __future__ import annotations

from pathlib import Path

from sim2real.tasks.spec import resolve_hook

#: Deploy node kind -> ``"module:attr"`` of its entry ``entry(args, robot) -> int``.
NODE_ENTRIES = {
    "quadrotor": "sim2real.deploy.nodes.quadrotor:quadrotor_deploy_main",
    "swarm": "sim2real.deploy.nodes.swarm:swarm_deploy_main",
    "legged": "sim2real.deploy.nodes.legged:legged_deploy_main",
}


def policy_node_kind(policy_dir: str | Path) -> str | None:
    """The deploy node kind of an exported policy's task; None when its metadata cannot be read or its task is not
    registered (the node's validation then says why).

    Raises:
        ConfigError: the task declares no deploy node (``TaskSpec.deploy`` is None) or an unknown one.
    """
    from sim2real.configs import ConfigError
    from sim2real.policies.artefact.metadata import PolicyMismatchError, load_metadata
    from sim2real.tasks import UnknownTaskError, get_task

    try:
        task = load_metadata(Path(policy_dir)).get("task")
        spec = get_task(str(task))
    except (PolicyMismatchError, UnknownTaskError):
        return None
    if spec.deploy is None:
        raise ConfigError(f"task '{task}' declares no deploy node: sim2real deploy cannot run its policies")
    if spec.deploy.node not in NODE_ENTRIES:
        raise ConfigError(f"task '{task}' declares the deploy node '{spec.deploy.node}', which does not exist "
                          f"(known: {', '.join(NODE_ENTRIES)})")
    return spec.deploy.node


def deploy_main(args) -> int:
    """``sim2real deploy``: the robot and its default namespace, the ROS names, the pre-flight check (metadata +
    ONNX and a fresh ``check.json``; a FAIL refuses unless ``--force``), then the node of the policy's kind, spun
    until ``--duration`` or Ctrl-C / SIGTERM (then the safe command is published once).

    Raises:
        PolicyMismatchError: the policy does not fit the robot or is damaged, or its check FAILs (the CLI prints
            ``error: ...`` and exits 2); also when ``configure`` fails with ``--activate``.
        ConfigError: unknown robot or unreadable robot YAML, bad ROS names, no ``--policy`` (nor ``--finetune``),
            a task without a deploy node, options the node refuses.
    """
    from sim2real.deploy.ros_names import check_ros_names, robot_namespace

    robot, robot_kind = robot_namespace(args)
    check_ros_names(args)  # (before the node modules, which import rclpy)
    from sim2real.deploy.watch.session import watch_from_args

    swarm = getattr(args, "drones", None) is not None
    # --viz is checked and its port bound here, before any ROS traffic; the run folder is made when the node starts
    watch = watch_from_args(args, robot, [args.swarm_ns if swarm else args.namespace],
                            record=getattr(args, "record", True))
    try:
        entry = _entry(args, robot, robot_kind)
        if watch is None:
            return entry(args, robot)
        with watch:
            return entry(args, robot)
    finally:
        if watch is not None:
            watch.close()


def _entry(args, robot: dict, robot_kind: str):
    """The entry ``entry(args, robot) -> int`` of the node this deploy runs (after the pre-flight check)."""
    from sim2real.configs import ConfigError

    if getattr(args, "finetune", None) is not None:
        from sim2real.extras import require_extra

        require_extra("finetune", "sim2real deploy --finetune", ("zmq", "mcap", "mcap_ros2"))
        from sim2real.deploy.finetune.node import finetune_deploy_main

        return finetune_deploy_main
    if args.policy is None:
        raise ConfigError("sim2real deploy needs --policy DIR (or --finetune SESSION)")
    from sim2real.policies.check.run import deploy_gate

    deploy_gate(args.policy, robot, force=getattr(args, "force", False))
    kind = policy_node_kind(args.policy) or ("legged" if robot_kind == "legged" else "quadrotor")
    if getattr(args, "drones", None) is not None and kind == "quadrotor":
        kind = "swarm"
    return resolve_hook(NODE_ENTRIES[kind], "")
