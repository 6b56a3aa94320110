"""``kernelswarm tune``: an Optuna study of one kernel's knobs (study.py), its trials evaluated
in parallel on the evaluation workers (execute.py)."""
