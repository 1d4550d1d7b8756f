"""The job table's one writer, in parts by concern; ``managers.JobManager`` puts them together."""
