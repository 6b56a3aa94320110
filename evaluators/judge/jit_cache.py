"""A folder of a JIT's compiled code built ahead for one candidate, and its copies.

The build ahead (evaluators/judge/prebuild.py) runs candidate code, so what it leaves is
untrusted: only regular files two levels down (Triton's ``<key>/<file>`` layout) with plain
names travel, links are not followed, and the whole is bounded. Triton's group files name
their members by absolute path; every copy points them at the files beside it, so that the
copy, not the folder it came from, is what the runner's Triton reads.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

MAX_FOLDER_BYTES = 256 << 20
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}\Z")


def safe_files(root: Path) -> list[tuple[Path, Path]]:
    """(relative path, absolute path) of the regular files of ``root`` at ``<dir>/<file>`` or
    ``<file>`` with plain names, links not followed, up to ``MAX_FOLDER_BYTES`` in all."""
    found, total = [], 0
    for first in sorted(os.scandir(root), key=lambda e: e.name):
        if not _SAFE_NAME.match(first.name):
            continue
        if first.is_file(follow_symlinks=False):
            entries = [(Path(first.name), first)]
        elif first.is_dir(follow_symlinks=False):
            entries = [(Path(first.name) / e.name, e) for e in os.scandir(first.path)
                       if _SAFE_NAME.match(e.name) and e.is_file(follow_symlinks=False)]
        else:
            continue
        for relative, entry in entries:
            total += entry.stat(follow_symlinks=False).st_size
            if total > MAX_FOLDER_BYTES:
                return found
            found.append((relative, Path(entry.path)))
    return found


def copy_tree(source: Path, target: Path) -> int:
    """The ``safe_files`` of ``source`` copied under ``target``; how many. Triton's group files
    (``<key>/__grp__<name>.json``) name their members by absolute path: they are written
    anew, naming the copies (only files of their own folder)."""
    copied = 0
    for relative, path in safe_files(source):
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target / relative, follow_symlinks=False)
        copied += 1
    relocate_groups(target)
    return copied


def relocate_groups(folder: Path) -> None:
    """Every group file of ``folder`` pointed at the files beside it."""
    for group in folder.glob("*/__grp__*.json"):
        _relocate_group(group)


def _relocate_group(group: Path) -> None:
    """Point a copied group file's members at the files beside it (a member that is not there
    is dropped: Triton then compiles that kernel again rather than read another file)."""
    try:
        members = json.loads(group.read_text()).get("child_paths")
    except (OSError, ValueError, AttributeError):
        members = None
    here = {}
    if isinstance(members, dict):
        for name, path in members.items():
            base = os.path.basename(str(path))
            if isinstance(name, str) and _SAFE_NAME.match(base) and \
                    (group.parent / base).is_file():
                here[name] = str(group.parent.resolve() / base)
    group.write_text(json.dumps({"child_paths": here}))
