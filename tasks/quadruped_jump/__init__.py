"""Task ``quadruped-jump``: jump in place, to landing targets and over obstacles (Go2-class quadruped, MuJoCo)."""

from sim2real.tasks.spec import (
    BenchSpec, CheckSpec, CurriculaBenchSpec, DeploySpec, FinetuneSpec, ReplayCriterion, TaskSpec,
)

SPEC = TaskSpec(
    name="quadruped-jump",
    description="Go2-class quadruped: jump in place, forward/diagonal to landing targets, and over obstacles (MuJoCo)",
    env_class=".env:QuadrupedJumpEnv",
    checks=".checks:check_config",
    play=".play:play",
    view=".view:JumpView",
    markers=".markers:markers",
    # the task's success (landing within tolerance, upright, real flight); the shipped policy: 0.92-0.96, falls
    # 0-2%; a policy with two thigh outputs swapped: about 0.56, falls 25%
    check=CheckSpec(
        criterion=ReplayCriterion("success_rate", "", 0.7, 0.85, fail_drop=0.3, warn_drop=0.15,
                                  guard=("fall_rate", 0.15, 0.3),
                                  show=("fall_rate", "pos_error_mean", "peak_height_mean")),
        episodes=48, deploy_observations=True),
    deploy=DeploySpec(node="legged"),
    # configs saved before each key existed, as they were trained: no stand-only episodes, no feet-in-the-air,
    # joint-velocity, action-rate or sharp stillness term while standing, the take-off counted from the command's
    # start, no penalty anneal, best.pt picked on stage 1 alone, the obstacle box centred midway along the jump, a
    # success judged on the final landing alone (a hop and a walk counted; a foot on the box too), stage 2 entered at
    # distance_min (distance_start is saved in every config), the landing xy followed to the window's end
    legacy_defaults=(("env.stand_prob", 0.0), ("env.stand_after_jump", False), ("rewards.weights.stand_feet_air", 0.0),
                     ("env.takeoff_after_command", False), ("curriculum.penalty_anneal", "none"),
                     ("rewards.weights.stand_joint_vel", 0.0), ("env.stand_anneal", False),
                     ("rewards.weights.stand_still", 0.0), ("rewards.weights.stand_action_rate", 0.0),
                     ("eval.selection_difficulties", []), ("command.obstacle_near_edge", None),
                     ("success.first_landing", False), ("success.clear_obstacle", False),
                     ("rewards.weights.first_landing", 0.0), ("rewards.weights.obstacle_touch", 0.0),
                     ("command.distance_min_start", None), ("env.hold_first_landing", False),
                     ("rewards.weights.ballistic_landing", 0.0)),
    # null: stage 2 entered at distance_min; the box centred midway along the jump (how those configs trained)
    nullable=("command.distance_min_start", "command.obstacle_near_edge"),
    finetune=FinetuneSpec(gap_metric="success_rate", higher_is_better=True),
    bench=BenchSpec(entries=("train-profile", "throughput", "curricula", "finetune", "gpu"),
                    curricula=CurriculaBenchSpec(space="landing", hand_written="stages",
                                                 hand_written_overrides=("curriculum.max_difficulty=2.0",))),
)
