"""``corvid-actors serve``: the long-running daemon.

Start-up: configuration (``config/default.toml`` < user file < environment < command
line), the data directory (mode 0700) with its pid/lock file, loguru logs (human or JSON
lines, ``session_id`` and ``agent`` bound), the model server (a real provider, or the
stub Ollama server, loudly announced, when none is configured), the Runtime on SQLite in
the data directory (or PostgreSQL by URL) — which resets sessions left running by a dead
daemon — the AdminActor and its socket, and finally every session marked for resume is
resumed.

Shutdown (SIGTERM, SIGINT or ``admin shutdown``): new work is refused, sessions are
stopped with reason ``server_shutdown`` and marked for resume, pending approvals are
denied, the store is flushed and closed; exit 0 within ``daemon.shutdown_timeout_s`` or
exit 1 when that bound passes. A second SIGINT exits at once (130).

A core actor that dies (the runtime's root policy, :mod:`corvid_actors.runtime`) shuts the
runtime down the same way (sessions marked for resume) and the daemon exits
:data:`EXIT_CORE_FAILURE` (70), so a process supervisor (systemd ``Restart=on-failure``)
starts it again and the sessions resume: never a daemon that is up but dead inside.

Signals reach the main thread through a self-pipe: handlers only write a byte, and the
main thread blocks reading it — no polling, no sleeping.

The way down (the graceful shutdown, a drain's hand-over, the last-resort close) is
:mod:`~corvid_actors.daemon.shutdown`; closing the process to same-uid readers is
:mod:`~corvid_actors.daemon.hardening`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import pykka
from loguru import logger

from corvid_actors.actors.admin import AdminActor, AdminCommand, AdminWiring, Follow, Ready
from corvid_actors.clock import io_clock
from corvid_actors.config import Config
from corvid_actors.daemon.cluster_link import ClusterLink
from corvid_actors.daemon.hardening import dumpable as _dumpable
from corvid_actors.daemon.hardening import forbid_memory_access
from corvid_actors.daemon.http_listener import start_http_listener
from corvid_actors.daemon.logs import DaemonLogs
from corvid_actors.daemon.model_server import ModelServer, start_model_server
from corvid_actors.daemon.process import (
    DAEMON_LOG,
    DaemonError,
    PidLock,
    Wakeup,
    configure_logging,
    detach,
    prepare_data_dir,
    redacted,
    store_lock,
)
from corvid_actors.daemon.protocol import Request
from corvid_actors.daemon.settings import (
    ServeOptions,
    data_dir_of,
    load_daemon_config,
    package_version,
)
from corvid_actors.daemon.shutdown import DRAIN_POLL_S as DRAIN_POLL_S
from corvid_actors.daemon.shutdown import Drain, close_quietly, stop_gracefully
from corvid_actors.daemon.socket_server import AdminSocketServer, SocketSettings
from corvid_actors.daemon.systemd import SystemdNotifier
from corvid_actors.errors import SHUTTING_DOWN, AdminError
from corvid_actors.runtime import Runtime
from corvid_actors.runtime.lifecycle import freeze_startup_heap
from corvid_actors.telemetry.metrics import MetricsServer
from corvid_actors.telemetry.tracing import tracer_provider_from_environment

# --- the daemon ----------------------------------------------------------------------------

#: exit code after a core actor died and the runtime shut itself down (EX_SOFTWARE)
EXIT_CORE_FAILURE = 70
#: Wakeup byte: the runtime failed (posted by its fatal listener)
_FATAL = b"f"


class Daemon:
    """One run of ``serve``; :meth:`run` returns the exit code."""

    def __init__(self, config: Config, data_dir: Path, stub_script: str | None = None,
                 on_ready: Callable[[dict[str, Any]], None] | None = None, logs: DaemonLogs | None = None) -> None:
        self.config = config
        #: the log sinks SIGHUP re-opens (None: as configured by the caller, nothing to re-open)
        self.logs = logs
        self.on_ready = on_ready
        self.settings = config.daemon
        self.data_dir = data_dir
        self.stub_script = stub_script
        self.wake = Wakeup()
        self.systemd = SystemdNotifier()
        self.runtime: Runtime | None = None
        self.admin: pykka.ActorRef[AdminActor] | None = None
        self.server: AdminSocketServer | None = None
        self.models: ModelServer | None = None
        self.link: ClusterLink | None = None
        self.metrics_server: MetricsServer | None = None
        self.http: Any = None  # corvid_actors.http.HttpListener, when [http] listen is set
        self._shutdown_reason = "signal"
        self._exit_code = 0
        self.about: dict[str, Any] = {}

    def run(self) -> int:
        """Start everything, serve until told to stop, shut down; returns the exit code (main thread)."""
        signal.signal(signal.SIGINT, self._poster(Wakeup.SIGINT))
        signal.signal(signal.SIGTERM, self._poster(Wakeup.SIGTERM))
        signal.signal(signal.SIGHUP, self._poster(Wakeup.SIGHUP))
        s = self.settings
        self.server = server = AdminSocketServer(
            self.data_dir / s.socket_name, self._handle, self._follow,
            SocketSettings(token=s.admin_token, max_request_bytes=s.admin_max_request_bytes,
                           max_connections=s.admin_max_connections, follow_queue_events=s.follow_queue_events,
                           max_send_bytes=s.admin_max_send_bytes, auth_timeout_s=s.admin_auth_timeout_s,
                           idle_timeout_s=s.admin_idle_timeout_s),
        )
        server.bind()  # fail fast on a bad path, before anything is started
        try:
            self.models = models = start_model_server(self.config, self.stub_script)
            runtime = self._start_runtime(models, server)
            self.about["gc_frozen_objects"] = freeze_startup_heap()
            server.start()
            if runtime.config.http.listen:  # the HTTP API ([http]; the `http` extra)
                self.http = start_http_listener(runtime, runtime.internals.store, runtime.internals.cluster,
                                                self._handle, self._follow)
                self.about["http"] = self.http.url
            models.announce()
            logger.info("corvid-actors daemon ready: pid {}, admin socket {}, database {}, model server {}",
                        os.getpid(), server.path, self.about["database"], models.description)
            if self.on_ready is not None:
                self.on_ready(dict(self.about))
            self.systemd.notify("READY=1", f"MAINPID={os.getpid()}", "STATUS=serving")
            self._watchdog()
            return self._main_loop(runtime)
        finally:
            self._close_quietly()

    def _watchdog(self) -> None:
        """Post the next WATCHDOG wake-up, when systemd asked for keep-alives."""
        if self.systemd.watchdog_interval_s is not None:
            io_clock().call_later(self.systemd.watchdog_interval_s, lambda: self.wake.post(Wakeup.WATCHDOG))

    def _poster(self, code: bytes) -> Callable[[int, FrameType | None], None]:
        """A signal handler that only posts ``code`` to the self-pipe (runs on the main thread)."""
        def post(_signum: int, _frame: FrameType | None) -> None:
            self.wake.post(code)

        return post

    def _start_runtime(self, models: ModelServer, server: AdminSocketServer) -> Runtime:
        credits = self.settings.with_credits and _credits_available()
        self.runtime = runtime = Runtime(models.config, providers=models.providers,
                                         workspace_dir=self.data_dir / "workspace", with_credits=credits,
                                         tracer_provider=tracer_provider_from_environment())
        if runtime.stale_session_ids:
            logger.warning("{} session(s) were left running by a previous daemon: reset and marked for resume",
                           len(runtime.stale_session_ids))
        sandbox = runtime.sandbox_status()
        if sandbox.warning:
            logger.warning(sandbox.warning)  # once per daemon start; each session publishes it too
        elif sandbox.refuses_commands:
            logger.error("The OS sandbox is unavailable ({}): tool commands will be refused "
                         "([tools.sandbox] mode = \"required\")", sandbox.reason)
        self.about = about = {
            "pid": os.getpid(), "data_dir": str(self.data_dir), "database": redacted(runtime.database_url),
            "socket": str(server.path), "model_server": models.description,
            "stub": models.stub_url is not None, "credits": credits, "version": package_version(),
            "sandbox": sandbox.as_dict(), "dumpable": _dumpable(),
        }
        runtime.metrics.add_stats_part("followers", server.follow_stats)  # `corvid-actors events` streams
        listen = runtime.config.telemetry.metrics_listen
        if listen:  # [telemetry] metrics_listen: Prometheus scrapes the runtime's registry here
            self.metrics_server = MetricsServer(runtime.metrics.registry, listen)
            about["metrics"] = self.metrics_server.url
            logger.info("serving Prometheus metrics at {}", self.metrics_server.url)
        if runtime.internals.cluster is not None:  # one of several daemons on one PostgreSQL
            about["daemon_id"] = runtime.internals.cluster.daemon_id
        # the admin actor is one more actor of the runtime's tree: its wiring alone uses the internals
        tree = runtime.internals
        if tree.cluster is not None:  # several daemons: commands and events cross through the database
            self.link = ClusterLink(runtime, tree.cluster, runtime.database_url,
                                    timeout_s=self.settings.admin_client_timeout_s)
            self.link.start()
        self.admin = AdminActor.start(tree.tracker, AdminWiring(
            supervisor=tree.supervisor, approvals=tree.approvals, bus=tree.bus, timers=tree.timers,
            slot_pool=tree.slot_pool, credits=tree.credits, store=tree.store,
            providers=tree.providers, clock=runtime.clock, settings=self.settings, about=about,
            request_shutdown=self._request_shutdown,
            router=self.link.router if self.link is not None else None, access=runtime.config.access,
            metrics=tree.metrics,
            log_fields=self.logs.follow_sessions if self.logs is not None else None,
        ))
        if self.link is not None:
            self.link.bind(self.admin)
        self.admin.ask(Ready())  # subscribed to the bus before any session is resumed
        runtime.watch(self.admin, "admin")
        runtime.add_fatal_listener(lambda failure: self.wake.post(_FATAL))
        self._resume_marked(runtime)
        return runtime

    @staticmethod
    def _resume_marked(runtime: Runtime) -> None:
        ids = runtime.take_restart_pending()
        runtime.resume_all(ids)  # in batches; one bad row does not keep the others down
        if ids:
            logger.info("resumed {} session(s) marked for resume", len(ids))

    # --- admin socket hooks (connection threads) ------------------------------------------------

    def _live_admin(self) -> pykka.ActorRef[AdminActor]:
        if self.admin is None:  # the socket serves only once the AdminActor is up
            raise AdminError(SHUTTING_DOWN, "the daemon is shutting down")
        return self.admin

    def _handle(self, request: Request) -> Any:
        try:
            result = self._live_admin().ask(AdminCommand(request.cmd, request.args, caller=request.caller))
            return result.get() if isinstance(result, pykka.Future) else result
        except pykka.ActorDeadError:
            raise AdminError(SHUTTING_DOWN, "the daemon is shutting down") from None

    def _follow(self, session_id: str | None, sink: Callable[[str, str, dict[str, Any]], None]) -> Callable[[], None]:
        try:
            return self._live_admin().ask(Follow(session_id, sink), block=True)
        except pykka.ActorDeadError:
            raise AdminError(SHUTTING_DOWN, "the daemon is shutting down") from None

    def _request_shutdown(self, reason: str) -> None:
        self._shutdown_reason = reason
        self.wake.post(Wakeup.ADMIN)

    # --- main loop and shutdown -----------------------------------------------------------------

    def _main_loop(self, runtime: Runtime) -> int:
        stopping = False
        while True:
            code = self.wake.read()
            if code == _FATAL:
                logger.critical("the runtime failed ({}): exiting {} for the process supervisor to restart us",
                                runtime.failure, EXIT_CORE_FAILURE)
                self._exit_code = EXIT_CORE_FAILURE
                self._shutdown_reason = "core_actor_failed"
                code = Wakeup.ADMIN
            if code in (Wakeup.SIGINT, Wakeup.SIGTERM, Wakeup.ADMIN):
                if stopping:
                    if code == Wakeup.SIGINT:
                        logger.error("second SIGINT: exiting now, without finishing the shutdown")
                        os._exit(130)
                    continue
                stopping = True
                self.systemd.notify("STOPPING=1", "STATUS=shutting down")
                reason = {Wakeup.SIGINT: "SIGINT", Wakeup.SIGTERM: "SIGTERM"}.get(code, self._shutdown_reason)
                logger.info("shutting down ({}): refusing new work, stopping sessions (bound {} s)",
                            reason, self.settings.shutdown_timeout_s)
                io_clock().call_later(self.settings.shutdown_timeout_s, lambda: self.wake.post(Wakeup.OVERDUE))
                threading.Thread(target=self._graceful, args=(runtime,), name="daemon-shutdown",
                                 daemon=True).start()
            elif code == Wakeup.DONE:
                if self._exit_code:
                    logger.error("daemon stopped after a failure (exit {})", self._exit_code)
                else:
                    logger.info("daemon stopped cleanly")
                return self._exit_code
            elif code == Wakeup.SIGHUP:
                if self.logs is not None:
                    self.logs.reopen()
            elif code == Wakeup.WATCHDOG:
                self.systemd.notify("WATCHDOG=1")  # from this loop: a stuck main thread misses it
                self._watchdog()
            elif code == Wakeup.OVERDUE:
                logger.error("shutdown took longer than daemon.shutdown_timeout_s = {} s: exiting anyway",
                             self.settings.shutdown_timeout_s)
                os._exit(1)

    def _graceful(self, runtime: Runtime) -> None:
        """The shutdown thread (:func:`~corvid_actors.daemon.shutdown.stop_gracefully`);
        the main thread hears DONE whatever happens."""
        try:
            tree = runtime.internals
            drain = None
            if self._shutdown_reason == "drain" and tree.cluster is not None:
                drain = Drain(tree.cluster, tree.supervisor)
            stop_gracefully(runtime, self._live_admin(), self.server, self.http, drain=drain,
                            shutdown_timeout_s=self.settings.shutdown_timeout_s)
        except Exception:  # noqa: BLE001 - the main thread must hear DONE whatever happened
            logger.exception("error during shutdown")
        finally:
            self.wake.post(Wakeup.DONE)

    def _close_quietly(self) -> None:
        close_quietly(self.runtime, server=self.server, http=self.http, admin=self.admin, link=self.link,
                      metrics_server=self.metrics_server, models=self.models)


def _credits_available() -> bool:
    return importlib.util.find_spec("corvid_actors.actors.credits") is not None


def serve(options: ServeOptions, out: TextIO | None = None) -> int:
    """Run the daemon until it is told to stop; returns the process exit code.

    With ``options.detach`` the daemon runs in a forked child and this returns (0) as soon
    as it is ready, after printing where it runs to ``out``; 1 if it failed to start.
    """
    log_format = options.log_format or ("json" if options.json else None)
    config = load_daemon_config(options.config_file, data_dir=options.data_dir, provider=options.provider,
                                log_format=log_format, log_level=options.log_level)
    data_dir = data_dir_of(config).resolve()
    if options.detach:
        return _detach(config, data_dir, options, out or sys.stdout)
    configure_logging(config)
    forbid_memory_access()
    prepare_data_dir(data_dir)
    logs = DaemonLogs(config, data_dir)
    logs.open()  # the log file, when one is configured, once the data directory exists
    with PidLock(data_dir / config.daemon.pid_file_name), _store_lock(config):
        return Daemon(config, data_dir, options.stub_script, logs=logs).run()


def _detach(config: Config, data_dir: Path, options: ServeOptions, out: TextIO) -> int:
    """The daemon in the background; prints where it runs once it is ready."""
    prepare_data_dir(data_dir)
    PidLock(data_dir / config.daemon.pid_file_name).check()  # before the fork: nothing written anywhere
    lock = store_lock(config.store.resolved_url())
    if lock is not None:
        lock.check()
    log_path = data_dir / DAEMON_LOG
    try:
        os.close(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    except OSError as exc:
        raise DaemonError(f"cannot write the daemon log {log_path}: {exc.strerror} "
                          "(choose a writable data directory with --data-dir / CORVID_DATA_DIR)") from None

    logs = DaemonLogs(config, data_dir, detached_log=log_path)

    def run(ready: Callable[[dict[str, Any]], None]) -> int:
        forbid_memory_access()
        with PidLock(data_dir / config.daemon.pid_file_name), _store_lock(config):
            return Daemon(config, data_dir, options.stub_script, on_ready=ready, logs=logs).run()

    about = detach(log_path, run, logs.open)
    if about is None or "error" in about:
        why = about["error"] if about else f"it ended during start-up; see {log_path}"
        raise DaemonError(f"the daemon did not start: {why}")
    if options.json:
        out.write(json.dumps({"ok": True, **about, "log": str(log_path)}) + "\n")
        return 0
    out.write(f"corvid-actors daemon running: pid {about['pid']}, model server {about['model_server']}\n"
              f"  admin socket {about['socket']}, database {about['database']}, log {log_path}\n")
    if about.get("stub"):
        out.write("  NOTE: no model provider is configured, so sessions get canned replies from the STUB model;\n"
                  "  set OLLAMA_HOST (a running Ollama) or ANTHROPIC_API_KEY and restart for real answers.\n")
    return 0


def _store_lock(config: Config) -> AbstractContextManager[Any]:
    """One daemon per SQLite file (see ``process.store_lock``); nothing for PostgreSQL."""
    return store_lock(config.store.resolved_url()) or nullcontext()
