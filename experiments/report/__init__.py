"""``kernelswarm report``: a run or sweep folder read back (data.py), drawn (plots.py) and
written as one self-contained HTML page and its markdown twin (writer.py)."""
