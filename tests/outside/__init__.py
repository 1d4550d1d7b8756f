"""Modules outside every installed app and outside ``OPTIONS["MODULES"]`` (issue 19, A1).

``search`` is shaped like a reusable package whose tasks module is not an
installed app's (as a search indexer's is, when the installed app's AppConfig
subclasses the package's own): its task must run with no configuration. The
other modules are what a hostile job row might name.
"""
