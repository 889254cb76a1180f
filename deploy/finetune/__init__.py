"""On-robot fine-tuning (``sim2real finetune``, ``sim2real deploy --finetune``): a residual on top of an exported base
policy, learned from the robot's own transitions by residual SAC with RLPD's changes, while the robot flies.

Modules, from the bottom up:

* :mod:`~sim2real.deploy.finetune.residual_sac`: the residual (spec, actor, composed action), SB3's SAC with a
  critic ensemble, the mixed online/prior replay buffer, macro transitions over held residuals;
* :mod:`~sim2real.deploy.finetune.learner`: the learner algorithm over arrays (:class:`Learner`, prior sim
  rollouts, transitions from a recording);
* :mod:`~sim2real.deploy.finetune.policy_package`: signed policy-version packages (pack, verify) and the session
  key's HMAC;
* :mod:`~sim2real.deploy.finetune.policy_channel`: the ZeroMQ link between the edge actor and the learner (signed
  transition batches, packages, heartbeats) and its threat model;
* :mod:`~sim2real.deploy.finetune.session_locks`: the session's lock files (one actor per robot, one learner);
* :mod:`~sim2real.deploy.finetune.session`: a session on disk (layout, crash-safety contract, versions, buffers,
  locks, the robots of a fleet and their recordings);
* :mod:`~sim2real.deploy.finetune.config`: the fine-tuning config (``configs/finetune.yaml``) and the task's part
  (its :class:`~sim2real.tasks.spec.FinetuneSpec`: gap metric, robot reward), base policy and stand-in configs;
* :mod:`~sim2real.deploy.finetune.actor`: the edge actor (base policy + residual, recording, version swaps);
* :mod:`~sim2real.deploy.finetune.session_learner`: the learner of a session (built from its files, its network
  loop ``finetune learner``, the in-process :class:`SyncLearner`);
* :mod:`~sim2real.deploy.finetune.runner`: a session on the stand-in robot end to end (create, learner child
  process shared by a fleet's robots, actor loop, held-out scores and the gap recovered);
* :mod:`~sim2real.deploy.finetune.identify`: system identification from a session's recorded states and commands
  (``finetune identify``: the task's DR parameters and each motor's thrust, by batched replay in the simulator),
  with :mod:`~sim2real.deploy.finetune.identify_legged` for legged robots (friction, strength, floor, latency);
* :mod:`~sim2real.deploy.finetune.improve`: the residual trained with PPO on thousands of simulated robots of the
  identified kind, gated against the running version there before it is published (``finetune improve``);
* :mod:`~sim2real.deploy.finetune.node_options`, :mod:`~sim2real.deploy.finetune.node_episodes`,
  :mod:`~sim2real.deploy.finetune.node`: the ROS 2 edge actor (``deploy --finetune``): options and safety
  envelope, the control tick's phases and episodes, the lifecycle node and its command;
* :mod:`~sim2real.deploy.finetune.cli`: the ``finetune`` subcommands' arguments and entry point.

Only ``sim2real.cli`` and ``sim2real.bench`` import this package; it imports the layers below it (configs, sim,
curricula, tasks, policies, deploy's ROS plumbing, deploy.nodes, hardware.standins).
"""
