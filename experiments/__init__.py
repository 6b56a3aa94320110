"""The user-facing layer: CLI, configuration, runs, sweeps and studies executed, result sinks
and the built-in tasks."""
