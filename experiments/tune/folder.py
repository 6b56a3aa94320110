"""What makes a folder a ``kernelswarm tune`` run folder: the names its files go by. Light on
imports, so that ``kernelswarm report`` and ``kernelswarm runs`` tell a tune folder from a run
folder without loading Ray or Optuna."""

from __future__ import annotations

from pathlib import Path

from kernelswarm.search import source_suffix

TUNE_FILE = "tune.json"  # what is tuned and where the study lives; what --resume reads
JOURNAL = "optuna.journal"  # the study's default storage


def kernel_file_name(language: str) -> str:
    """The tuned source, kept beside ``tune.json``."""
    return f"kernel{source_suffix(language)}"


def is_tune_folder(folder: Path) -> bool:
    return (folder / TUNE_FILE).is_file() and (folder / "config.json").is_file()
