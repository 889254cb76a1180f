"""Task ``humanoid-footsteps``: walk on planned footsteps (JVRC-1-class humanoid, MuJoCo)."""

from sim2real.tasks.spec import BenchSpec, CheckSpec, DeploySpec, PlanHooks, ReplayCriterion, TaskSpec

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
    check=CheckSpec(criterion=ReplayCriterion("success_rate", "", 0.1, 0.5, fail_drop=0.3, warn_drop=0.1),
                    episodes=16),
    deploy=DeploySpec(node="legged"),
    bench=BenchSpec(entries=("train-profile", "throughput", "gpu")),
    symmetry=".symmetry:augment",
)
