"""What a task declares about itself: :class:`TaskSpec` and the parts other packages read.

A task is one folder (a Python package): its ``__init__.py`` defines ``SPEC = TaskSpec(...)`` and nothing heavy
(no torch import), its ``config.yaml`` holds the default config, and its modules hold the env, observations,
rewards, terminations, commands, checks and whatever hooks it declares. Hooks are named, not imported, as
``"module:attr"``; a module name starting with ``.`` is relative to the task's package (``".env:MyEnv"``).

Packages outside ``tasks/`` ask the registry (:func:`sim2real.tasks.get_task`) for these parts and never compare
task names. A task without a part (no deploy node, no fine-tuning gap, no plan files) leaves it ``None`` and the
commands that need it say so in one line.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path


def resolve_hook(ref: str, package: str):
    """The object named by ``ref`` (``"module:attr"``; a module starting with ``.`` is relative to ``package``)."""
    module, _, attr = ref.partition(":")
    mod = importlib.import_module(module, package if module.startswith(".") else None)
    return getattr(mod, attr) if attr else mod


@dataclass(frozen=True)
class ReplayCriterion:
    """How ``sim2real check`` judges a task's replay.

    ``metric`` (higher is better unless ``lower_is_better``) must reach ``nominal_fail`` in the nominal config
    (else FAIL; short of ``nominal_warn``: WARN). A variant FAILs when its metric is worse than the nominal by more
    than ``fail_drop`` (absolute, in the metric's unit; for a lower-is-better metric: worse than
    ``max(fail_abs, fail_ratio x nominal)``), WARNs beyond ``warn_drop`` / ``max(nominal_warn, warn_ratio x
    nominal)``. ``guard`` (optional): a second, lower-is-better metric (name, FAIL above this in the nominal config,
    FAIL above this in a variant), e.g. the crash or fall rate. ``show``: other metrics printed beside it."""

    metric: str
    unit: str
    nominal_fail: float
    nominal_warn: float
    lower_is_better: bool = False
    fail_drop: float = 0.3
    warn_drop: float = 0.1
    fail_abs: float = 0.0
    fail_ratio: float = 3.0
    warn_ratio: float = 1.5
    guard: tuple[str, float, float] | None = None
    show: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckSpec:
    """The task's part of ``sim2real check`` (the sim-to-sim replay).

    Attributes:
        criterion: how the replay is judged.
        episodes: default replay episodes per variant (``episode_unit`` each).
        variants: default variants (of ``nominal, fidelity, dynamics, latency, jitter``); None: all.
        fine_physics: ``fidelity`` variant of a task with its own torch dynamics: physics steps this many times
            finer at the same control period (None: the MuJoCo full-fidelity solver, ``sim.fidelity=full``).
        deploy_observations: the replay builds the policy's observations from the env's ``robot_state()`` through
            the exported metadata's terms, as the deploy node does (else it uses the env's own observations).
        episode_unit: what one replay episode is called in the report (``episodes``, ``rooms``).
    """

    criterion: ReplayCriterion
    episodes: int
    variants: tuple[str, ...] | None = None
    fine_physics: int | None = None
    deploy_observations: bool = False
    episode_unit: str = "episodes"


@dataclass(frozen=True)
class DeploySpec:
    """How the task's exported policy runs on a robot.

    Attributes:
        node: the deploy node kind that runs it (``quadrotor``, ``swarm``, ``legged``; the deploy package maps
            each kind to its node).
    """

    node: str


@dataclass(frozen=True)
class FinetuneSpec:
    """The task's part of an on-robot fine-tuning session.

    Attributes:
        gap_metric: the held-out metric the reality gap is measured on (a key of the env's ``summarize_outcomes``).
        higher_is_better: whether a larger ``gap_metric`` is better (success rate) or worse (an error).
        reward: ``"module:attr"`` of the per-step reward the edge actor records, a plain function of the robot
            state, the actions and the task's reward parameters (see the task's ``rewards`` module).
        gap: the name of the task's stand-in reality gap (a key of
            ``sim2real.hardware.standins.reality_gap.REALITY_GAPS``), used for ``standin.gap: default`` and by
            ``bench finetune``; None: its robot kind's.
    """

    gap_metric: str
    higher_is_better: bool
    reward: str | None = None
    gap: str | None = None


@dataclass(frozen=True)
class PlanHooks:
    """A task whose held-out set can also be user-written plan files (``eval --plans``, ``play --plans``).

    Attributes (``"module:attr"``):
        load: ``load(path, cfg) -> (plans, cfg)``: the plans of a file and the config to run them with.
        evaluate: ``evaluate(cfg, policy, plans, repeats) -> metrics``.
        report: ``report(metrics) -> str``: the table ``eval --plans`` prints.
    """

    load: str
    evaluate: str
    report: str


@dataclass(frozen=True)
class CurriculaBenchSpec:
    """How ``sim2real bench curricula`` compares teachers on the task.

    Attributes:
        space: the task space every automatic teacher samples and the held-out grid covers.
        hand_written: the task's own rule (``curriculum.teacher``) and the overrides it needs to be comparable.
        overrides: config overrides for every teacher (e.g. a wider success tolerance).
    """

    space: str
    hand_written: str
    hand_written_overrides: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class BenchSpec:
    """The benchmarks that apply to the task (``sim2real bench NAME --task T``).

    Attributes:
        entries: names of the benches that run on this task (see ``sim2real bench --help``).
        curricula: the teacher comparison's settings (None: ``bench curricula`` refuses the task).
        profile_baseline: ``(label, overrides)``: config overrides that restore settings the task's defaults
            replaced, which ``bench train-profile`` profiles beside the defaults in the same run (None: the
            defaults have not changed since profiles were first taken).
    """

    entries: tuple[str, ...] = ()
    curricula: CurriculaBenchSpec | None = None
    profile_baseline: tuple[str, tuple[str, ...]] | None = None


@dataclass(frozen=True)
class TaskSpec:
    """A registered task.

    Attributes:
        name: the task's name (``--task``).
        description: one line for ``sim2real list``.
        env_class: ``"module:attr"`` of the rsl-rl ``VecEnv`` subclass, built as ``cls(cfg, num_envs, device,
            eval_mode)``.
        checks: ``"module:attr"`` of ``check_config(cfg)``, raising ``ConfigError`` on a value out of range.
        config: the default config file, relative to the task's folder.
        play: ``"module:attr"`` of ``play(cfg, policy, output, *, video, duration_s, plans) -> Path`` (None: ``play``
            refuses the task).
        plans: plan-file hooks (None: ``--plans`` is refused).
        view: ``"module:attr"`` of the task's scene view for ``sim2real view``, built as ``cls(env)`` on an
            eval-mode env (a :class:`~sim2real.sim.scene.SceneView`: models, labels and qpos of each scene; None:
            ``view`` refuses the task).
        markers: ``"module:attr"`` of ``markers(env) -> list[list[Marker]]``: the task's markers (goals, landing
            targets, footsteps, obstacles; :class:`~sim2real.sim.markers.Marker`, world frame, in the palette of
            :mod:`sim2real.sim.markers`) in each of ``env``'s scenes now, one list per scene in the scene view's
            order. The one description of them: the task's ``play`` draws them into its videos (``play``, ``train
            --video``) and ``view`` into the browser (None: no markers).
        check: the replay part of ``sim2real check`` (None: ``check`` runs its metadata and ONNX sections only).
        deploy: how the policy runs on a robot (None: ``deploy`` refuses the task).
        finetune: fine-tuning's gap metric and reward (None: ``finetune`` refuses the task).
        bench: the benchmarks that apply.
        symmetry: ``"module:attr"`` of the task's mirror function ``f(env, obs, actions) -> (obs, actions)``, the
            ``data_augmentation_func`` of rsl-rl-lib's ``Symmetry`` extension (the batch followed by its mirror
            image; see :mod:`sim2real.tasks.symmetry`), used when ``train.symmetry.enabled`` (None: that setting is
            refused).
        legacy_defaults: ``(dotted key, value)`` pairs for configs saved before the key existed (checkpoints,
            exported policies) where the value that reproduces how they were trained differs from today's default
            (e.g. a physics effect added later, on by default now, absent then).
        nullable: dotted config keys that may also be set to null (the task's checks and env give it a meaning,
            e.g. the value of configs saved before the key existed).
        package: the task's Python package (set by the registry when it finds the spec).
        folder: the task's folder (set by the registry).
    """

    name: str
    description: str
    env_class: str
    checks: str
    config: str = "config.yaml"
    play: str | None = None
    plans: PlanHooks | None = None
    view: str | None = None
    markers: str | None = None
    check: CheckSpec | None = None
    deploy: DeploySpec | None = None
    finetune: FinetuneSpec | None = None
    bench: BenchSpec = field(default_factory=BenchSpec)
    symmetry: str | None = None
    legacy_defaults: tuple[tuple[str, object], ...] = ()
    nullable: tuple[str, ...] = ()
    package: str = ""
    folder: Path | None = None

    @property
    def config_path(self) -> Path:
        """The default config file of the task (``<folder>/<config>``)."""
        return Path(self.folder) / self.config

    def hook(self, ref: str):
        """The object a hook string of this spec names (relative modules resolve inside the task's package).

        Raises:
            ConfigError: the module cannot be imported or lacks the attribute (one line naming the task and hook).
        """
        try:
            return resolve_hook(ref, self.package)
        except (ImportError, AttributeError, SyntaxError) as exc:
            from sim2real.configs import ConfigError

            raise ConfigError(f"task {self.name}: its hook {ref!r} cannot be resolved ({type(exc).__name__}: "
                              f"{exc})") from None

    def load_env_class(self):
        return self.hook(self.env_class)

    def check_config(self, cfg: dict) -> None:
        """Raise :class:`~sim2real.configs.ConfigError` naming the first config value out of range."""
        self.symmetry_function(cfg)  # first: a task without a mirror function says so in one line
        self.hook(self.checks)(cfg)

    def markers_function(self):
        """The task's ``markers(env)`` hook (see :attr:`markers`), or None for a task that draws no markers.

        Raises:
            ConfigError: its hook cannot be resolved.
        """
        return None if self.markers is None else self.hook(self.markers)

    def symmetry_function(self, cfg: dict):
        """The task's mirror function when ``cfg`` enables ``train.symmetry``, else None.

        Raises:
            ConfigError: enabled for a task without one, or its hook cannot be resolved.
        """
        if not symmetry_enabled(cfg):
            return None
        if self.symmetry is None:
            from sim2real.configs import ConfigError

            raise ConfigError(f"config key 'train.symmetry.enabled': task {self.name} has no mirror function "
                              f"(TaskSpec.symmetry)")
        return self.hook(self.symmetry)


def symmetry_enabled(cfg: dict) -> bool:
    """Whether a resolved task config turns rsl-rl-lib's symmetry extension on (``train.symmetry.enabled``)."""
    train = cfg.get("train")
    sym = train.get("symmetry") if isinstance(train, dict) else None
    return isinstance(sym, dict) and bool(sym.get("enabled", False))
