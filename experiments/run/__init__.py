"""``kernelswarm run``: a run prepared (prepare.py) and driven to its results (execute.py), its
folder read back (folder.py), resumed from its records (resume.py), its log (log.py), and
compiler messages that name the user's file (compiler_messages.py)."""
