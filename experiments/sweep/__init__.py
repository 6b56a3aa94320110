"""``kernelswarm sweep``: a sweep file expanded into cells (sweep_file.py), the cells searched
together on one cluster and one pool of workers (execute.py), and their results (results.py)."""
