"""Task ``humanoid-footsteps``: walk on planned footsteps (JVRC-1-class humanoid, MuJoCo)."""

from sim2real.tasks.spec import (
    BenchSpec, CheckSpec, DeploySpec, FinetuneSpec, PlanHooks, ReplayCriterion, TaskSpec,
)

SPEC = TaskSpec(
    name="humanoid-footsteps",
    description="JVRC-1-class humanoid: walk on planned footsteps (any direction, turning, stepping in place, stairs) "
                "(MuJoCo)",
    env_class=".env:HumanoidFootstepsEnv",
    checks=".checks:check_config",
    play=".play:play",
    view="sim2real.tasks.legged_view:LeggedView",
    markers=".markers:markers",
    plans=PlanHooks(load=".evaluation:load_plan_file", evaluate=".evaluation:evaluate_plans",
                    report=".evaluation:format_report"),
    # 48 replay episodes per variant: with 16 a variant's success rate moved by about 0.12 between draws, as much
    # as the 0.3 fail drop allows for two estimates (the shipped policy's jitter row: 0.31 at 16, 0.25 at 64).
    check=CheckSpec(criterion=ReplayCriterion("success_rate", "", 0.1, 0.5, fail_drop=0.3, warn_drop=0.1),
                    episodes=48),
    deploy=DeploySpec(node="legged"),
    # the gap is measured on the success rate (episodes with hit rate >= 0.8 and no fall): one number for both halves
    # of the goal table, as the jump's
    finetune=FinetuneSpec(gap_metric="success_rate", higher_is_better=True, gap="humanoid"),
    bench=BenchSpec(entries=("train-profile", "throughput", "finetune", "gpu")),
    symmetry=".symmetry:augment",
)
