"""The judge: the evaluator's own process, which never runs candidate code.

It builds candidates, spawns one fresh runner process per candidate (evaluators/runner/), puts
every input in shared memory, computes every reference itself, compares the outputs that come
back, cross-checks the times the runner reports against wall time it measures, and decides the
verdict.
"""
