"""KernelBench problems as task folders: a problem file read and imported (problem.py), a whole
level at once (level.py), and the ``task.py`` written beside it (template.py, signature.py)."""
