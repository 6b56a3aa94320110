"""The user-facing layer: CLI, configuration, the runner, result sinks and the built-in tasks."""
