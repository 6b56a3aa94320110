"""The runner: the process that loads one candidate, launches it and times it.

Runs only inside the sandbox process (``python -m kernelswarm.evaluators.runner``), started by
the judge (evaluators/judge/). Once the candidate is loaded the whole process is the candidate's:
nothing here decides a verdict. It copies the inputs the judge put in shared memory to its own
tensors, calls the candidate through the task's launcher, copies the outputs (and the inputs
after the call) back, and reports raw observations: errors, per-call times, launched kernels.
"""
