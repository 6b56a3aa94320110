"""Measuring: CPU and GPU timers and the timing protocol's settings, the arenas tensors travel
in between judge and runner, the machine's figures and GPU state, and profiles."""
