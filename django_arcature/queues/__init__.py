"""Queue control: pause and resume, fleet-wide concurrency and rate limits per queue."""
