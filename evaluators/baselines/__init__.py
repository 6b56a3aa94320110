"""What the reference costs: eager, ``torch.compile`` and library anchors timed in a trusted
process of their own, cached per machine, and the reference timings the benchmarks check."""
