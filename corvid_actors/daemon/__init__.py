"""The daemon and its faces: ``corvid-actors serve``, the admin socket, the operator CLI.

The layer above the runtime: nothing else in ``corvid_actors`` imports it. One module per
concern:

- :mod:`~corvid_actors.daemon.cli` — the ``corvid-actors`` command line (``python -m corvid_actors``)
- :mod:`~corvid_actors.daemon.admin_cli` — the operator's subcommands (``serve``, ``admin …``,
  ``events``, ``run``) and their arguments
- :mod:`~corvid_actors.daemon.render` — how replies are shown to people (tables, one-liners)
- :mod:`~corvid_actors.daemon.settings` — the daemon's configuration (``CORVID_*`` variables, data dir)
- :mod:`~corvid_actors.daemon.service` — ``serve``: the long-running daemon, start-up and shutdown
- :mod:`~corvid_actors.daemon.process` — pid lock, logs, signals' self-pipe, running detached
- :mod:`~corvid_actors.daemon.model_server` — which model server to use (a real provider or the stub)
- :mod:`~corvid_actors.daemon.protocol` — the admin socket's JSON-lines protocol (pure)
- :mod:`~corvid_actors.daemon.socket_server` — the admin socket server (a thread per connection)
- :mod:`~corvid_actors.daemon.socket_io` — a follower's bounded queue, the socket's line reader
- :mod:`~corvid_actors.daemon.client` — the admin socket's client
- :mod:`~corvid_actors.daemon.foreground` — ``run``: one session in the foreground
- :mod:`~corvid_actors.daemon.demo` — ``demo``: the supervision scenario on simulated time
"""
