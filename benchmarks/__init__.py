"""Benchmarks of kernelswarm's own machinery (``python -m benchmarks.<name>``)."""
