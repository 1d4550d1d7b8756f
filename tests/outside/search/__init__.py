"""A package that is not an installed app, with a ``tasks`` module."""
