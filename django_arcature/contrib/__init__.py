"""Optional integrations: Prometheus metrics, OpenTelemetry traces, error reporting.

Each lives in its own module and imports its third-party library only there, so
the core package keeps needing nothing but Django. All of them are built on the
observer events of :mod:`django_arcature.signals`, which are sent only after the
write they report has landed (DESIGN §10): a write that was fenced out is never
counted, traced or reported as what it tried to be.
"""
