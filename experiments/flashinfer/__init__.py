"""FlashInfer-Trace in and out: a definition and its workloads imported as a task folder
(trace.py, template.py), and a kernel exported as a solution with its traces (export.py)."""
