"""Task ``quadrotor-hover``: reach and hold a goal position (Crazyflie-class quadrotor)."""

from sim2real.tasks.spec import (
    BenchSpec, CheckSpec, CurriculaBenchSpec, DeploySpec, FinetuneSpec, ReplayCriterion, TaskSpec,
)

SPEC = TaskSpec(
    name="quadrotor-hover",
    description="Crazyflie-class quadrotor: reach and hold a goal position from random initial states",
    env_class=".env:QuadrotorHoverEnv",
    checks=".checks:check_config",
    play=".play:play",
    view=".view:HoverView",
    markers=".markers:markers",
    # position error at the end of each 5 s episode; success (5 cm, 0.1 m/s for 1 s) is shown, not judged: the
    # main job's policy holds about 4 cm, the shipped one about 1 cm (docs/benchmarks.md)
    check=CheckSpec(
        criterion=ReplayCriterion("pos_error_mean", "m", 0.15, 0.08, lower_is_better=True, fail_abs=0.3,
                                  fail_ratio=3.0, warn_ratio=1.5, guard=("crash_rate", 0.05, 0.2),
                                  show=("success_rate", "crash_rate", "pos_error_median")),
        episodes=64, fine_physics=5, deploy_observations=True),
    deploy=DeploySpec(node="quadrotor"),
    finetune=FinetuneSpec(gap_metric="pos_error_mean", higher_is_better=False, reward=".rewards:finetune_reward"),
    # The hover's success tolerance is widened to 10 cm and 0.2 m/s for every teacher: at the task's 5 cm the
    # held-out success of one policy swings between evaluations, which would drown the differences between teachers;
    # it keeps the motor interface its table in docs/curricula.md was measured with.
    bench=BenchSpec(entries=("train-profile", "throughput", "hover-time", "inference", "soak", "curricula",
                             "finetune"),
                    curricula=CurriculaBenchSpec(space="start", hand_written="levels",
                                                 overrides=("env.success_pos_tol=0.1", "env.success_vel_tol=0.2",
                                                            "env.action_interface=motor_thrust")),
                    # the settings of 2026-12-03 morning, before issue 20's recipe (docs/benchmarks.md): every
                    # default issue 20 changed since is undone here (before 2026-12-08 the last four were missing,
                    # so the baseline drifted with the defaults of 2026-12-07 and 2026-12-08)
                    profile_baseline=("2026-12-03 before issue 20", ("observations.history_length.last_action=1",
                                                     "rewards.params.precision_scale=0.02",
                                                     "env.action_interface=motor_thrust",
                                                     "observations.policy=[pos_error_w,rot_matrix_w,lin_vel_w,"
                                                     "ang_vel_b,last_action]",
                                                     "rewards.weights.position=1.0",
                                                     "train.num_learning_epochs=5", "env.num_envs=1024"))),
)
