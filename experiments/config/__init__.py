"""The configuration: one typed schema loaded from TOML and validated at load (schema.py), and
its validation errors as a user reads them (errors.py). The ready configurations
(quickstart.toml, tune.toml, sweep_gpu.toml) sit in experiments/ itself; QUICKSTART and
TUNE_DEFAULTS name two of them."""

from .schema import (
    BUILTIN_TASKS,
    QUICKSTART,
    TUNE_DEFAULTS,
    Config,
    ConfigError,
    apply_overrides,
    load_config,
    load_run_config,
    validate_config,
)

__all__ = ["BUILTIN_TASKS", "QUICKSTART", "TUNE_DEFAULTS", "Config", "ConfigError",
           "apply_overrides", "load_config", "load_run_config", "validate_config"]
