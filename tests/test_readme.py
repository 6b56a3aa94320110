"""The README a newcomer reads: short, and every command, setting and link in it real.

It is what it is, the two commands, what they print, where the results are and what to try
next; the history of the figures lives in docs/history.md. A command that is renamed, a setting
that is dropped or a page that moves breaks these tests before it breaks a newcomer's first hour.
"""

from __future__ import annotations

import re
import shlex

import pytest

from kernelswarm.experiments.commands.cli import COMMANDS, parser_for
from kernelswarm.experiments.config import load_config
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
MAX_LINES = 120


def test_the_readme_is_short_enough_to_read_first():
    assert len(README.splitlines()) <= MAX_LINES
    # no dated history: figures of earlier days are in docs/history.md
    assert "Earlier figures" not in README and "Earlier readings" not in README
    assert (ROOT / "docs" / "history.md").is_file()


def test_every_page_the_readme_links_exists():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing


def _examples() -> list[str]:
    """The README's code: its blocks' lines and its inline spans (which may wrap), each as one
    line."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", README, re.DOTALL)
    lines = [line.split("#")[0] for block in blocks for line in block.splitlines()]
    inline = re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", README, flags=re.DOTALL))
    return [" ".join(code.split()) for code in (*lines, *inline) if code.strip()]


def _commands() -> list[list[str]]:
    """Every `kernelswarm ...` command of the README, as words."""
    found = []
    for code in _examples():
        for line in code.split("&&"):
            words = shlex.split(line.strip())
            if len(words) > 1 and words[0] == "kernelswarm":
                found.append(words[1:])
    return found


def test_every_command_the_readme_shows_parses():
    commands = _commands()
    assert {c[0] for c in commands} >= {"run", "eval", "tasks", "tune", "sweep", "runs", "report"}
    for words in commands:
        if words[0].startswith("-"):
            continue  # kernelswarm --help, --version
        assert words[0] in COMMANDS, words
        try:
            parser_for(words[0]).parse_args(words)
        except SystemExit as exc:
            pytest.fail(f"`kernelswarm {' '.join(words)}` does not parse ({exc.code})")


def test_every_setting_the_readme_shows_is_a_key_of_the_configuration():
    examples = [code for code in _examples() if "--set" in code]
    assert len(examples) >= 2
    for code in examples:  # the settings of one example go together
        settings = re.findall(r"--set '([^']+)'", code) + \
            re.findall(r"--set ([a-z_.]+=[^\s`']+)", code)
        assert settings, code
        load_config(None, settings)  # a ConfigError names any key or value that is not one
