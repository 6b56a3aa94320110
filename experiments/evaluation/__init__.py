"""One kernel file judged outside a search, exactly as a search judges a candidate: the file read
as a candidate of its task (kernel_file.py) and judged with a run's or the default settings
(judge_file.py). ``kernelswarm eval``, ``tune`` and ``tasks export-flashinfer`` use it."""
