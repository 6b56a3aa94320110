"""``kernelswarm run``: a run prepared (prepare.py) and driven to its results (runner.py), its
folder read back (folder.py), resumed from its records (resume.py), and its log (log.py)."""
