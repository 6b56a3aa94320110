"""``kernelswarm run`` with an LLM endpoint that cannot serve is refused in a few seconds, before
a run folder or Ray exists, exit 2, its one line naming the setting to fix: nothing listening,
a server that never answers, a web server that is not OpenAI's protocol, a refused key, a model
the server does not serve. Real HTTP servers on loopback, the real openai client."""

from __future__ import annotations

import functools
import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.agents.llm import LoopbackServer
from kernelswarm.experiments.agent.roles import check_agent
from kernelswarm.experiments.commands.cli import main
from kernelswarm.experiments.config import load_config
from kernelswarm.experiments.run import execute
from tests.agents.llm.conftest import API_KEY, KEY_ENV, MODEL

REFUSED_WITHIN_S = 5.0


def _run(tmp_path: Path, url: str, *extra: str) -> list[str]:
    return ["run", *[arg for pair in (("--set", s) for s in [
        f'run.out_dir="{tmp_path / "runs"}"', "run.name=endpoint", "agent.kind=llm",
        f"agent.llm.model={MODEL}", f"agent.llm.base_url={url}",
        f'agent.llm.api_key_env="{KEY_ENV}"', *extra]) for arg in pair]]


@pytest.fixture
def no_ray(monkeypatch):
    """Ray must not start: the check comes first."""
    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started for a run whose LLM endpoint cannot serve")
    monkeypatch.setattr(execute, "connect", refuse)


def _refused(tmp_path: Path, capsys, command: list[str]) -> str:
    """Run ``command``; assert it was refused as a bad configuration, in time, leaving nothing;
    its last line."""
    started = time.monotonic()
    code = main(command)
    elapsed = time.monotonic() - started
    out = capsys.readouterr().out
    assert code == 2, out
    assert elapsed < REFUSED_WITHIN_S, f"refused after {elapsed:.1f} s"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    last = " ".join(out.split())  # one line, however the console wrapped it
    assert last.startswith("error: ") and last.count("error: ") == 1
    return last


@pytest.fixture
def free_url() -> str:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/v1"


def test_nothing_listening_at_base_url_is_refused_at_once(tmp_path, capsys, no_ray, free_url):
    last = _refused(tmp_path, capsys, _run(tmp_path, free_url))
    assert last.startswith(f"error: agent.llm.base_url: cannot reach {free_url}: ")
    assert "Connection refused" in last and "every role" in last


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A port that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        yield f"http://127.0.0.1:{listening.getsockname()[1]}/v1"


def test_a_server_that_never_answers_is_refused_within_five_seconds(tmp_path, capsys, no_ray,
                                                                   silent_url):
    last = _refused(tmp_path, capsys, _run(tmp_path, silent_url, "agent.llm.timeout_s=300"))
    assert last.startswith(f"error: agent.llm.base_url: no answer from {silent_url} within ")


@pytest.fixture
def web_server(tmp_path) -> Iterator[str]:
    """A plain web server (files, GET only): answers, but not OpenAI's protocol."""
    (tmp_path / "site").mkdir()
    handler = functools.partial(_QuietFiles, directory=str(tmp_path / "site"))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002
        pass


def test_a_server_that_is_not_openais_protocol_is_refused(tmp_path, capsys, no_ray, web_server):
    last = _refused(tmp_path, capsys, _run(tmp_path, web_server))
    assert last.startswith(f"error: agent.llm.base_url: {web_server} does not speak OpenAI's "
                           f"protocol")
    assert "usually ending in /v1" in last


def test_a_refused_key_names_api_key_env_and_never_shows_the_key(tmp_path, capsys, no_ray,
                                                                 monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-not-the-servers-key")
    with LoopbackServer(api_key=API_KEY, models=(MODEL,)) as server:
        last = _refused(tmp_path, capsys, _run(tmp_path, server.url))
    assert last.startswith(f"error: agent.llm.api_key_env: {server.url} refused the key in "
                           f"${KEY_ENV} (HTTP 401)")
    assert "sk-not-the-servers-key" not in last


def test_a_model_the_server_does_not_serve_names_the_roles_model_key(tmp_path, capsys, no_ray):
    with LoopbackServer(api_key=API_KEY, models=(MODEL, "loopback-small")) as server:
        last = _refused(tmp_path, capsys, _run(tmp_path, server.url,
                                               "agent.planner.model=loopback-large"))
        asked = len(server.requests)
    assert last.startswith(f"error: agent.planner.model: {server.url} does not serve model "
                           f"'loopback-large' (it serves: {MODEL}, loopback-small) (for planner")
    assert asked == 0  # the check costs no completion


@pytest.mark.parametrize("lists_models", [True, False])
def test_a_server_that_can_serve_passes_and_is_asked_for_nothing(lists_models):
    """Listing the model, or listing none and having a chat endpoint (which refuses a request
    of no messages, as OpenAI's does): the run goes on, and no completion was asked for."""
    with LoopbackServer(api_key=API_KEY, models=(MODEL,), lists_models=lists_models) as server:
        config = load_config(None, ["agent.kind=llm", f"agent.llm.model={MODEL}",
                                    f"agent.llm.base_url={server.url}",
                                    f'agent.llm.api_key_env="{KEY_ENV}"'])
        check_agent(config)
        assert server.requests == []
