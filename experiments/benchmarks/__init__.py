"""Benchmarks of kernelswarm's own machinery (``python -m kernelswarm.experiments.benchmarks.<name>``)."""
