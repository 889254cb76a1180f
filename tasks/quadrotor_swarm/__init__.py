"""Task ``quadrotor-swarm``: a swarm of Crazyflie-class quadrotors flies to its goals through a forest of columns."""

from sim2real.tasks.spec import BenchSpec, CheckSpec, DeploySpec, ReplayCriterion, TaskSpec

SPEC = TaskSpec(
    name="quadrotor-swarm",
    description="Crazyflie-class quadrotor swarm: fly to goals through column obstacles without collisions "
                "(attention policy)",
    env_class=".env:QuadrotorSwarmEnv",
    checks=".checks:check_config",
    play=".play:play",
    view=".view:SwarmView",
    markers=".markers:markers",
    # drones at their goals at the end (room success, all drones, is shown: with 8 drones it is about 0.5). A swarm
    # episode is 12 s of flight whose step cost is mostly per-step overhead (about 10 s of CPU per config on 2 cores):
    # the fidelity and jitter variants run on request (--variants).
    check=CheckSpec(
        criterion=ReplayCriterion("at_goal_rate", "", 0.5, 0.7, fail_drop=0.3, warn_drop=0.15,
                                  show=("success_rate", "collisions_per_drone_minute", "pos_error_mean")),
        episodes=2, variants=("nominal", "dynamics", "latency"), fine_physics=2, episode_unit="rooms"),
    deploy=DeploySpec(node="swarm"),
    bench=BenchSpec(entries=("train-profile", "swarm")),
    # checkpoints and policies from before the downwash model (2026-12-03) were trained without it
    legacy_defaults=(("env.downwash", False),),
)
