"""Config value checks shared by every task (each task's ``checks.py`` adds its own ranges).

Each function raises :class:`~sim2real.configs.ConfigError` naming the first offending key.
"""

from __future__ import annotations

import math

import torch

from sim2real.configs import ConfigError
from sim2real.tasks.observations import OBS_TERMS

# Activation names rsl-rl-lib 5.5.1 resolves (rsl_rl.utils.resolve_nn_activation).
ACTIVATIONS = ("elu", "selu", "relu", "crelu", "lrelu", "tanh", "sigmoid", "softplus", "gelu", "swish", "mish",
               "identity")


def require(ok: bool, key: str, message: str) -> None:
    """Raise ConfigError ``config key '<key>': <message>`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"config key '{key}': {message}")


def check_observations(obs: dict) -> None:
    """``observations.policy`` names registered terms; noise stds are >= 0; scales (if any) are finite; history
    lengths (if any) are integers >= 1 of listed terms, or 1 (the current value only: a no-op) for a registered
    term the list leaves out, so that a term dropped from ``observations.policy`` with ``--set`` (which merges into
    the task's ``history_length`` map, never removes a key) needs no second edit."""
    for name in obs["policy"]:
        require(name in OBS_TERMS, "observations.policy",
                f"unknown observation term {name!r} (known: {', '.join(sorted(OBS_TERMS))})")
    for name, std in obs["noise"].items():
        require(std >= 0, f"observations.noise.{name}", f"must be >= 0, got {std}")
    for name, scale in obs.get("scales", {}).items():
        require(name in obs["policy"], f"observations.scales.{name}", "is not a term of observations.policy")
        require(scale == scale and abs(scale) != float("inf"), f"observations.scales.{name}", "must be finite")
    for name, length in obs.get("history_length", {}).items():
        unlisted_noop = name in OBS_TERMS and length == 1 and not isinstance(length, bool)
        require(name in obs["policy"] or unlisted_noop, f"observations.history_length.{name}",
                "is not a term of observations.policy")
        require(isinstance(length, int) and not isinstance(length, bool) and length >= 1,
                f"observations.history_length.{name}", f"must be an integer >= 1, got {length!r}")
    for name, stds in (obs.get("fixed_std") or {}).items():
        key = f"observations.fixed_std.{name}"
        require(name in obs["policy"], key, "is not a term of observations.policy")
        size = OBS_TERMS[name].size
        require(size > 0, key, f"{name}'s size is set by the robot or the task: not supported")
        require(isinstance(stds, list) and len(stds) == size, key,
                f"needs one std per column of {name} ({size}), got {stds!r}")
        require(all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf") for v in stds),
                key, f"stds must be positive and finite, got {stds!r}")


def check_quadrotor_robot(robot: dict) -> None:
    """A quadrotor robot config: ``robot.mjcf`` (kept for a visual model) must be empty, since the quadrotor tasks
    simulate the config's own rigid-body and rotor figures and load no MJCF; a path there was silently ignored."""
    require(not robot.get("mjcf"), "robot.mjcf",
            f"the quadrotor tasks simulate the robot config's mass, inertia and rotor figures and load no MJCF "
            f"(got {robot.get('mjcf')!r}); set those keys instead, e.g. --set robot.mass=0.03")


def check_quadrotor_dr(dr: dict) -> None:
    """The quadrotor ``domain_rand`` section (:mod:`sim2real.tasks.quadrotor_dr`)."""
    for key in ("mass_scale", "inertia_scale", "thrust_scale", "motor_time_constant", "latency_steps"):
        lo, hi = dr[key]
        require(0 <= lo <= hi, f"domain_rand.{key}",
                f"must be a range [low, high] with 0 <= low <= high, got {dr[key]}")
    require(dr["mass_scale"][0] > 0 and dr["thrust_scale"][0] > 0 and dr["inertia_scale"][0] > 0
            and dr["motor_time_constant"][0] > 0, "domain_rand", "scales and time constants must be positive")
    require(dr["ext_force"] >= 0, "domain_rand.ext_force", f"must be >= 0, got {dr['ext_force']}")
    gains = dr.get("motor_thrust_scale", [1.0] * 4)
    require(isinstance(gains, (list, tuple)) and len(gains) == 4
            and all(isinstance(g, (int, float)) and 0 < g <= 2 for g in gains), "domain_rand.motor_thrust_scale",
            f"must be 4 per-motor thrust fractions in (0, 2], got {gains}")
    if "adr" in dr:
        a = dr["adr"]
        for key, value in (a["nominal"].items() if a["enabled"] else ()):  # (ranges may be pinned when off)
            lo, hi = (0.0, dr[key]) if key == "ext_force" else dr[key]
            require(lo <= value <= hi, f"domain_rand.adr.nominal.{key}",
                    f"must lie in the range it grows within, [{lo}, {hi}], got {value}")
        require(a["steps_to_limit"] >= 1, "domain_rand.adr.steps_to_limit", "must be >= 1")
        require(0 < a["boundary_prob"] <= 1, "domain_rand.adr.boundary_prob",
                "must lie in (0, 1] (at 0 no episode evaluates a bound and the ranges never move)")
        require(not a["enabled"] or dr["enabled"], "domain_rand.adr.enabled",
                "needs domain_rand.enabled=true (ADR widens the domain randomisation ranges)")
        require(a["buffer_size"] >= 1, "domain_rand.adr.buffer_size", "must be >= 1")
        require(0 <= a["threshold_low"] < a["threshold_high"] <= 1, "domain_rand.adr",
                "need 0 <= threshold_low < threshold_high <= 1")


MAX_REGIONS = 4096  # task-space regions (bandit arms): beyond, per-region statistics stop being estimable


def check_curriculum_choice(cfg: dict, spaces: tuple[str, ...]) -> None:
    """``curriculum.teacher`` names a teacher and ``curriculum.space`` one of the task's ``spaces`` (the first is
    the hand-written rule's own); ``curriculum.bins`` (if any) are >= 1."""
    from sim2real.curricula.driver import AUTOMATIC, HAND_WRITTEN

    cur = cfg["curriculum"]
    require(cur["teacher"] in HAND_WRITTEN + AUTOMATIC, "curriculum.teacher",
            f"unknown teacher {cur['teacher']!r} (choose from {', '.join(HAND_WRITTEN + AUTOMATIC)})")
    require(cur["space"] in spaces, "curriculum.space",
            f"unknown task space {cur['space']!r} (choose from {', '.join(spaces)})")
    require(cur["teacher"] not in HAND_WRITTEN or cur["space"] == spaces[0], "curriculum.space",
            f"the hand-written rule '{cur['teacher']}' works in the '{spaces[0]}' space; choose an automatic teacher "
            f"for '{cur['space']}'")
    bins = cur.get("bins", [1])
    require(all(float(b).is_integer() and b >= 1 for b in bins), "curriculum.bins",
            f"must be whole numbers >= 1 per dimension, got {bins}")
    require(math.prod(int(b) for b in bins) <= MAX_REGIONS, "curriculum.bins",
            f"at most {MAX_REGIONS} regions in all, got {bins}")
    from sim2real.curricula.base import TaskSpace
    from sim2real.curricula.teachers import build_teacher

    probe = TaskSpace(("x",), (0.0,), (1.0,))  # every teacher's parameters, chosen or not, must be valid
    for name, params in cur.get("teachers", {}).items():
        try:
            build_teacher(name, probe, 1, "cpu", dict(params or {}))
        except ValueError as exc:
            raise ConfigError(f"config key 'curriculum.teachers.{name}': {exc}") from None


def check_train(cfg: dict) -> None:
    """The ``train`` (rsl-rl PPO) and ``eval`` sections."""
    train = cfg["train"]
    for key in ("max_iterations", "num_steps_per_env", "save_interval", "num_learning_epochs", "num_mini_batches",
                "eval_episodes"):
        require(train[key] >= 1, f"train.{key}", f"must be at least 1, got {train[key]}")
    for key in ("keep_last", "eval_interval", "curriculum_plot_interval"):
        if key not in train:
            continue
        require(train[key] >= 0, f"train.{key}", f"must be >= 0, got {train[key]}")
    for key in ("actor_hidden_dims", "critic_hidden_dims"):
        require(len(train[key]) >= 1 and all(int(h) == h and h >= 1 for h in train[key]), f"train.{key}",
                f"must be a non-empty list of positive layer sizes, got {train[key]}")
    require(train["activation"] in ACTIVATIONS, "train.activation",
            f"must be one of {', '.join(ACTIVATIONS)}, got {train['activation']!r}")
    require(train["learning_rate"] > 0, "train.learning_rate", "must be positive")
    require(train["schedule"] in ("adaptive", "fixed"), "train.schedule", "must be 'adaptive' or 'fixed'")
    require(train["init_std"] > 0, "train.init_std", "must be positive")
    sym = train.get("symmetry")
    if isinstance(sym, dict):
        require(sym["mirror_loss_coeff"] >= 0, "train.symmetry.mirror_loss_coeff", "must be >= 0")
        require(not sym["mirror_loss"] or sym["mirror_loss_coeff"] > 0, "train.symmetry.mirror_loss_coeff",
                "must be positive when train.symmetry.mirror_loss is on")
        if sym["enabled"] and "observations" in cfg:
            from sim2real.tasks.symmetry import unmirrored_terms

            missing = unmirrored_terms(cfg["observations"].get("policy", []))
            require(not missing, "observations.policy", f"terms without a mirror rule for train.symmetry: {missing} "
                    f"(sim2real.tasks.symmetry.TERM_MIRRORS)")
    require(cfg["eval"]["num_episodes"] >= 1, "eval.num_episodes", "must be at least 1")
    require(cfg["eval"]["selection_seed"] != cfg["eval"]["seed"], "eval.selection_seed",
            f"must differ from eval.seed ({cfg['eval']['seed']}): the set that picks best.pt is held out from the "
            f"set sim2real eval reports")


def check_device(device: str) -> None:
    """Raise ConfigError unless torch can place tensors on ``device``."""
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"config key 'device': not a torch device: {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"config key 'device': {device!r} requested but CUDA is not available on this machine")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"config key 'device': unsupported device {device!r} (use cpu or cuda[:N])")


def check_mujoco_sim(sim: dict) -> None:
    """The ``sim`` section of a task on the MuJoCo backend: control period, threads, fast solver settings, the
    joints welded in simulation (``weld_joints``: regexes; not on the isaaclab backend)."""
    require(sim["control_dt"] > 0, "sim.control_dt", "must be positive")
    require(sim["nthread"] >= 0, "sim.nthread", "must be >= 0")
    from sim2real.sim.backends import BACKENDS

    backend = sim.get("backend", "mujoco")
    require(backend in BACKENDS, "sim.backend", f"'{backend}' (choose {', '.join(BACKENDS)})")
    fast = sim["fast"]
    if "timestep" in fast:
        require(fast["timestep"] > 0, "sim.fast.timestep", f"must be positive, got {fast['timestep']}")
    for key in ("iterations", "ls_iterations"):
        if key in fast:
            require(int(fast[key]) == fast[key] and fast[key] >= 1, f"sim.fast.{key}", "must be an integer >= 1")
    from sim2real.sim.weld import weld_patterns

    require(not weld_patterns(sim) or backend != "isaaclab", "sim.weld_joints",
            "the isaaclab backend simulates the full model; weld joints on --sim mujoco or mujoco-warp")


def check_staged_curriculum(cfg: dict, num_stages: int, task: str) -> None:
    """``curriculum`` (a :class:`~sim2real.curricula.StagedLevelCurriculum` of ``num_stages`` stages),
    ``eval.difficulty`` and (where the task has it) ``eval.selection_difficulties``."""
    cur = cfg["curriculum"]
    require(cur["num_stages"] == num_stages, "curriculum.num_stages", f"{task} has {num_stages} stages")
    require(0 <= cur["initial"] <= cur["max_difficulty"] <= cur["num_stages"], "curriculum.max_difficulty",
            "need 0 <= initial <= max_difficulty <= num_stages")
    require(0 <= cur["review_prob"] <= 1, "curriculum.review_prob", "must lie in [0, 1]")
    require(cur["step_up"] >= 0 and cur["step_down"] >= 0, "curriculum.step_up", "steps must be >= 0")
    for key in ("difficulty", "selection_difficulties"):  # the selection set's config holds a list in the first
        value = cfg["eval"].get(key, [])
        values = value if isinstance(value, list) else [value]
        require(all(0 <= v <= cur["num_stages"] for v in values), f"eval.{key}",
                f"must lie in [0, {cur['num_stages']}] (the curriculum's stages), got {value}")


def check_legged_robot(cfg: dict, task: str):
    """``robot`` is a valid ``kind: legged`` robot config; returns its
    :class:`~sim2real.sim.robot.LeggedRobot`."""
    from sim2real.sim.robot import LeggedRobot

    robot = cfg["robot"]
    if robot.get("kind") != "legged":
        raise ConfigError(f"config key 'robot': {task} needs a legged robot, '{robot.get('name')}' is a "
                          f"{robot.get('kind')}")
    return LeggedRobot.from_config(robot)


def check_penalty_anneal(cur: dict, kinds: tuple[str, ...]) -> None:
    """``curriculum.penalty_anneal`` one of ``kinds`` and its schedule's keys in range
    (:func:`sim2real.curricula.schedules.penalty_schedule`)."""
    require(cur["penalty_anneal"] in kinds, "curriculum.penalty_anneal",
            f"must be {' or '.join(kinds)}, got {cur['penalty_anneal']!r}")
    if cur["penalty_anneal"] == "none":
        return
    require(0 <= cur["penalty_competence_down"] < cur["penalty_competence_up"] <= 1, "curriculum.penalty_competence_up",
            "need 0 <= penalty_competence_down < penalty_competence_up <= 1")
    require(cur["penalty_competence_episodes"] >= 1, "curriculum.penalty_competence_episodes", "must be at least 1")
    require(cur["penalty_scale_initial"] > 0 and cur["penalty_scale_final"] > 0, "curriculum.penalty_scale_initial",
            "penalty scales must be positive")
    if cur["penalty_anneal"] == "competence":
        require(cur["penalty_scale_factor"] > 1, "curriculum.penalty_scale_factor", "must be above 1")
