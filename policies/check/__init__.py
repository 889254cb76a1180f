"""``sim2real check``: a pre-flight report card of an exported policy on the robot it is about to drive.

Sections, each ``PASS`` / ``WARN`` / ``FAIL`` with what was measured (one module each):

1. **metadata** (:func:`~sim2real.policies.check.metadata.check_metadata`): the policy's metadata against the robot
   config, through the deploy side's own validation (:class:`~sim2real.policies.artefact.onnx_policy.OnnxPolicy` ->
   :func:`~sim2real.policies.artefact.metadata.validate_metadata`, which collects every differing field), sorted into
   items: action interface vs robot kind, joint/motor names and their ORDER resolved by name (a permutation of the
   robot's joints names the swapped pairs), default pose, PD gains, action scale/clip (per joint by name), the
   control rate against the robot's ``control_rate_hz``, the observation layout, the other robot parameters and the
   artefact's integrity (checksum, embedded copy, provenance). Any difference is a FAIL. A ``metadata.json`` edited
   after export (it differs from the copy embedded in ``policy.onnx``, whose checksum still matches) is an
   ``artefact`` FAIL naming the differing keys (deploy loads ``metadata.json`` and refuses it for that difference);
   the other items, and sections 2 and 3, are then judged by the embedded copy, the metadata the model was exported
   with (:func:`~sim2real.policies.check.metadata.judged_metadata`), so that one edit is not reported as, e.g., a
   joint order FAIL.
2. **onnx** (:func:`~sim2real.policies.check.parity.check_onnx`): ``policy.onnx`` under onnxruntime. With the torch
   weights (the checkpoint the export was made from, recorded in ``training.checkpoint``, or ``checkpoint=``): max
   abs error of onnxruntime vs torch on ``PARITY_SAMPLES`` observations around the normaliser's statistics
   (batches of 1 and 64, some +-100 sigma away; :func:`~sim2real.policies.artefact.export.parity_inputs`), FAIL
   beyond ``|diff| <= PARITY_ATOL + PARITY_RTOL |torch|`` (1e-4 + 1e-4 relative, the export's own guard). Without
   them (``sim2real export`` writes only ``policy.onnx`` + ``metadata.json``; the shipped policies carry no
   checkpoint): WARN, after checking that the outputs are finite, deterministic (two runs bit-identical), batch-1
   shaped ``[1, A]`` and that batch 1 and batch 64 agree to ``BATCH_ATOL``; a failure of those is a FAIL.
3. **replay** (:func:`~sim2real.policies.check.replay.check_replay`, skipped by the deploy gate; run only for a task
   whose spec declares a :class:`~sim2real.tasks.spec.CheckSpec`, else reported as not run): the exported policy
   through onnxruntime in the task's evaluation set (``eval.seed``), its observation built each control step by an
   :class:`~sim2real.tasks.observations.ObservationBuilder` made from the metadata's terms and scales exactly as the
   deploy nodes make theirs (tasks whose ``CheckSpec.deploy_observations`` is set; the others' envs build theirs
   with the same classes their deploy nodes use), under ``VARIANTS``: the nominal (training) config; ``fidelity``:
   the legged model's own full-fidelity solver (``sim.fidelity=full``: elliptic cones, 2 ms), for the torch
   quadrotors physics steps ``CheckSpec.fine_physics`` times finer at the same control period; ``dynamics``:
   parameters pinned outside the training DR ranges (``PERTURBATIONS`` per robot kind, +-10-25%); ``latency``: one
   more control period of action delay than training drew; ``jitter``: each control tick late with probability
   ``JITTER_PROB`` (the previous command held one more period: periods of T or 2T). Each reports the task's own
   metrics (``summarize_outcomes`` of its env, as ``sim2real eval``) and a verdict by the task's
   :class:`~sim2real.tasks.spec.ReplayCriterion`: FAIL if the nominal metric misses the task's pass threshold or a
   variant collapses, WARN on a smaller degradation.
4. **verdict** (:mod:`~sim2real.policies.check.report`): the worst section (``PASS`` < ``WARN`` < ``FAIL``);
   ``sim2real check`` exits 0 for PASS/WARN, 1 for FAIL.

:func:`~sim2real.policies.check.run.run_check` assembles the report card. The deploy gate
(:func:`~sim2real.policies.check.run.deploy_gate`, run by ``sim2real deploy`` before any ROS traffic): sections 1
and 2 without torch weights (loading a checkpoint builds a task env: seconds; the gate adds about 0.1 s), plus a
fresh ``check.json`` beside the policy (written by ``sim2real check --json <policy>/check.json``): its FAIL (e.g. a
replay that collapsed) is honoured while its ``fingerprint`` (sha256 of ``policy.onnx`` and ``metadata.json`` and
the robot config's hash) matches; a stale one is ignored with a note; none is fine; an unreadable one (not JSON, not
a report) refuses the deploy, as a FAIL does, since its verdict cannot be honoured. ``--force`` overrides a FAIL
and an unreadable report, never a metadata FAIL: the deploy node itself refuses a policy whose metadata does not
match the robot.
"""
