"""``manage.py arcature_worker``: parse the options, build a Worker, run it.

``--help``, the option errors and the warnings printed before the loop starts
follow the project's ``LANGUAGE_CODE`` (``management/wording.py``). The log lines
of the running worker stay English on purpose: log searches, alerts and the
``ARCATURE["LOG_FORMAT"] = "json"`` records are matched on their wording in every
project, whatever language its admin speaks.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext, gettext_lazy

from django_arcature.checks.writers import writer_messages
from django_arcature.conf import (
    MAX_BATCH_SIZE,
    MAX_CONCURRENCY,
    MAX_INTERVAL_SECONDS,
    MAX_LEASE_SECONDS,
    MAX_SHUTDOWN_SECONDS,
    ArcatureSettings,
    get_settings,
)
from django_arcature.core.durations import parse_duration
from django_arcature.management.database import add_database_argument
from django_arcature.management.options import queue_name, seconds, whole_number
from django_arcature.management.ready import RefusedDatabaseStopsCommand
from django_arcature.management.wording import Translated
from django_arcature.worker import Worker

LEVELS = {0: logging.WARNING, 1: logging.INFO}


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(
            gettext("must be at least 1, not %(value)s") % {"value": value}
        )
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            gettext("must be a TCP port (1-65535), not %(value)s") % {"value": value}
        )
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(
            gettext("must be above 0, not %(value)s") % {"value": text}
        )
    return value


def _duration_seconds(text: str) -> float:
    try:
        seconds = parse_duration(text).total_seconds()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(
            gettext("must be above 0, not %(value)s") % {"value": text}
        )
    return seconds


def _defaulted(text: str, value: object) -> str:
    """A help text with the setting's value as its ``%(default)s``.

    Not argparse's own ``%(default)s``: the option's default is "unset" (None), so
    that the ARCATURE setting decides. argparse %-formats every help text again,
    hence the doubled ``%`` of whatever the translation holds.
    """
    return (text % {"default": value}).replace("%", "%%")


class Command(RefusedDatabaseStopsCommand):
    help = Translated(
        gettext_lazy(
            "Run background jobs: claim them from the database, run them on a thread pool and "
            "record each outcome. Stop with SIGTERM or Ctrl-C: running jobs get "
            "--shutdown-timeout seconds to finish, then go back to the queue; a second signal "
            "exits at once. Defaults come from the ARCATURE setting."
        )
    )

    def add_arguments(self, parser: CommandParser) -> None:
        try:
            conf = get_settings()
        except ImproperlyConfigured:
            # Show the built-in defaults in --help; the system checks, which run
            # before handle(), then report what is wrong with ARCATURE (arcature.E001).
            conf = ArcatureSettings()
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            type=queue_name,
            metavar="NAME",
            help=gettext("Run jobs from this queue; repeat for several. Default: every queue."),
        )
        parser.add_argument(
            "--exclude-queue",
            action="append",
            dest="exclude_queues",
            type=queue_name,
            default=[],
            metavar="NAME",
            help=gettext("Serve every queue (or every --queue) except this one; repeatable."),
        )
        parser.add_argument(
            "--concurrency",
            type=whole_number(1, MAX_CONCURRENCY),
            metavar="N",
            help=_defaulted(
                gettext(
                    "Handler threads (each runs async handlers on an event loop of its own). "
                    "Default: %(default)s."
                ),
                conf.concurrency,
            ),
        )
        parser.add_argument(
            "--batch",
            type=whole_number(1, MAX_BATCH_SIZE),
            metavar="N",
            help=_defaulted(
                gettext("Most jobs claimed in one database round trip. Default: %(default)s."),
                conf.batch_size,
            ),
        )
        parser.add_argument(
            "--lease",
            type=whole_number(1, MAX_LEASE_SECONDS),
            metavar="SECONDS",
            help=_defaulted(
                gettext(
                    "How long a claim lives without a heartbeat; the worker heartbeats every "
                    "third of it, so jobs may run longer. Default: %(default)s."
                ),
                conf.lease_seconds,
            ),
        )
        parser.add_argument(
            "--poll-interval",
            type=seconds(0, MAX_INTERVAL_SECONDS, above_low=True),
            metavar="SECONDS",
            help=_defaulted(
                gettext(
                    "Longest wait between looks for new jobs when idle (PostgreSQL is woken "
                    "at once by LISTEN/NOTIFY). Default: %(default)s."
                ),
                f"{conf.poll_interval:g}",
            ),
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help=gettext(
                "Claim until a claim comes back empty, finish those jobs, exit 0. Retries and "
                "delayed jobs not due yet stay pending (see --drain)."
            ),
        )
        parser.add_argument(
            "--drain",
            action="store_true",
            help=gettext(
                "Run until no job of the served queues is pending or running, retries and "
                "delayed jobs included, then exit 0 (1 if --drain-timeout passes first)."
            ),
        )
        parser.add_argument(
            "--drain-timeout",
            type=_duration_seconds,
            metavar="DURATION",
            help=gettext("Longest --drain runs (seconds, or e.g. 90s, 10m)."),
        )
        parser.add_argument(
            "--max-memory",
            type=_positive_float,
            metavar="MB",
            help=gettext(
                "Stop cleanly (exit 0, for the supervisor to restart) once resident memory "
                "reaches this many MB."
            ),
        )
        parser.add_argument(
            "--max-runtime",
            type=_duration_seconds,
            metavar="DURATION",
            help=gettext(
                "Stop cleanly (exit 0) after running this long (seconds, or e.g. 90m, 12h)."
            ),
        )
        parser.add_argument(
            "--no-duties",
            action="store_false",
            dest="duties",
            help=gettext("Do not fire periodic schedules or prune finished jobs in this worker."),
        )
        parser.add_argument(
            "--max-jobs",
            type=_positive_int,
            metavar="N",
            help=gettext("Exit after running this many jobs (to recycle the process)."),
        )
        parser.add_argument(
            "--worker-id",
            metavar="ID",
            help=gettext("Name recorded on the jobs this worker runs. Default: host:pid:random."),
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=seconds(0, MAX_SHUTDOWN_SECONDS),
            metavar="SECONDS",
            help=_defaulted(
                gettext(
                    "After SIGTERM/SIGINT, how long running jobs may finish before they are "
                    "handed back to the queue. Default: %(default)s."
                ),
                f"{conf.shutdown_timeout:g}",
            ),
        )
        parser.add_argument(
            "--no-listen",
            action="store_false",
            dest="listen",
            default=None,
            help=gettext(
                "PostgreSQL: poll instead of LISTEN/NOTIFY (e.g. behind PgBouncer in "
                "transaction mode)."
            ),
        )
        parser.add_argument(
            "--metrics-port",
            type=_port,
            metavar="PORT",
            help=gettext(
                "Serve Prometheus metrics on this port (needs django-arcature[prometheus]). "
                "Several workers on one host: set PROMETHEUS_MULTIPROC_DIR and give them all the "
                "same port (the documentation's “Observability” page).",
            ),
        )
        parser.add_argument(
            "--metrics-addr",
            default="127.0.0.1",
            metavar="ADDRESS",
            help=gettext(
                "The address the metrics port listens on. Default: 127.0.0.1, this host only; "
                "0.0.0.0 (every IPv4 interface) or one interface's address to let Prometheus on "
                "another host scrape it."
            ),
        )
        parser.add_argument(
            "--health-file",
            metavar="PATH",
            help=gettext(
                "Liveness: the main loop rewrites this JSON file about once a second (state, "
                "worker id, pid); `manage.py arcature_health --file PATH` checks it without the "
                "database. Its folder must exist and be writable."
            ),
        )
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        # Before migrate: say what to do, once, instead of retrying forever.
        using = self.migrated_database(options)
        self._configure_logging(options["verbosity"])
        self._warn_about_sqlite_writers(using)
        try:
            worker = Worker(
                queues=options["queues"],
                concurrency=options["concurrency"],
                batch=options["batch"],
                lease=options["lease"],
                poll_interval=options["poll_interval"],
                burst=options["burst"],
                max_jobs=options["max_jobs"],
                worker_id=options["worker_id"],
                shutdown_timeout=options["shutdown_timeout"],
                using=using,
                listen=options["listen"],
                exclude_queues=options["exclude_queues"],
                drain=options["drain"],
                drain_timeout=options["drain_timeout"],
                max_memory_mb=options["max_memory"],
                max_runtime=options["max_runtime"],
                duties=options["duties"],
                health_file=options["health_file"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        metrics = self._start_metrics(options, worker.using)
        try:
            status = worker.run()
        finally:
            if metrics is not None:
                metrics.stop()
        if status:
            raise SystemExit(status)

    def _start_metrics(self, options: dict[str, Any], using: str) -> Any:
        """The metrics server, serving before the first claim; None without --metrics-port."""
        if options["metrics_port"] is None:
            return None
        try:
            from django_arcature.contrib.prometheus.server import MetricsPortInUse, MetricsServer
        except ImportError as exc:
            raise CommandError(
                gettext(
                    "--metrics-port needs prometheus-client (%(problem)s); "
                    "pip install 'django-arcature[prometheus]'"
                )
                % {"problem": exc}
            ) from exc
        server = MetricsServer(options["metrics_port"], options["metrics_addr"], using=using)
        try:
            server.start()
        except (MetricsPortInUse, OSError) as exc:
            raise CommandError(str(exc)) from exc
        return server

    def _warn_about_sqlite_writers(self, alias: str) -> None:
        """arcature.W002 here, not on every command: a running worker is the second writer."""
        database = settings.DATABASES.get(alias)
        if database is None:
            return  # the Worker refuses an unknown alias with its own message
        for message in writer_messages({alias: database}):
            self.stderr.write(
                self.style.WARNING(
                    # The check's own words, translated where they are written (checks/).
                    gettext("(%(id)s) %(message)s\n\tHINT: %(hint)s")
                    % {"id": message.id, "message": message.msg, "hint": message.hint}
                )
            )

    def _configure_logging(self, verbosity: int) -> None:
        """Show progress unless the project already routes django_arcature's logs."""
        logger = logging.getLogger("django_arcature")
        logger.setLevel(LEVELS.get(verbosity, logging.DEBUG))
        if not logger.hasHandlers():
            # The command's own stderr (call_command(stderr=...) captures it), unstyled.
            handler = logging.StreamHandler(getattr(self.stderr, "_out", sys.stderr))
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            logger.addHandler(handler)
