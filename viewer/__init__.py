"""``sim2real view``: a browser viewer of policy rollouts and recorded sessions, drawn from the real MuJoCo
geometry (viser; no hand-written WebGL).

* :mod:`~sim2real.viewer.rollout`: N envs of a task's evaluation set rolled out and recorded through the task's
  scene view (its spec's ``view`` hook);
* :mod:`~sim2real.viewer.recording`: a recorded session (MCAP topics) posed by forward kinematics;
* :mod:`~sim2real.viewer.server`: the viser server (scene, timeline, play/pause, speed, env selector);
* :mod:`~sim2real.viewer.browser`: headless Chromium screenshots of a page (``view --screenshot``, tests).

Layer 7 (beside ``deploy/nodes``): it reads the policies (5) and the MCAP recordings (6); nothing below imports it.
"""
