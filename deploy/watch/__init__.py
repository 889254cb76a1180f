"""Watching a deployed robot: the run recording of every ``sim2real deploy`` and the live Foxglove view of
``--viz`` (deploy and stand-ins), both fed from the process's own ROS 2 topics (docs/deploy.md, "Watching a
deployed robot").

* :mod:`~sim2real.deploy.watch.options`: ``--viz [HOST:]PORT`` and the run folder (no ROS import);
* :mod:`~sim2real.deploy.watch.session`: :class:`~sim2real.deploy.watch.session.DeployWatch`, the watch's own ROS
  node (subscriptions, recording, view updates) and :func:`~sim2real.deploy.watch.session.watch_from_args`;
* :mod:`~sim2real.deploy.watch.view`: one robot's state, base transform and markers from its topics;
* :mod:`~sim2real.deploy.watch.live`: the Foxglove SDK's WebSocket server and the channels;
* :mod:`~sim2real.deploy.watch.layout`: Foxglove layouts (``deploy/foxglove/layout.json``, ``<run>/layout.json``).
"""
