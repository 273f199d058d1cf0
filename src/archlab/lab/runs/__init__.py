"""Runs: a suite's plan (one `archlab train` per arm x seed), the store, the runner, its worker and
executors, collecting finished runs into a table, a run's cost and the seeds a claim needs. Imports
spec, measures and analysis, never publishing."""
