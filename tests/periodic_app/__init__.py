"""An app whose ``jobs`` module declares a schedule (used by the no-cronsim settings)."""
