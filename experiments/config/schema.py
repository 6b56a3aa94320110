"""The configuration schema: one typed model, loaded from TOML, validated at load.

Every key is documented in ``docs/configuration.md``; an unknown key or a bad value raises
``ConfigError`` naming the key and what is allowed.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kernelswarm.search import LANGUAGES, SPECS, STRATEGIES

from .errors import describe
from .strategy_tables import StrategyOptions, stored_form

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

# The ready configurations and the built-in tasks live in experiments/ itself.
QUICKSTART = Path(__file__).parents[1] / "quickstart.toml"
BUILTIN_TASKS = Path(__file__).parents[1] / "tasks"
TUNE_DEFAULTS = Path(__file__).parents[1] / "tune.toml"  # kernelswarm tune without --config


class ConfigError(ValueError):
    """A configuration a user must fix; the message names the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunSection(_Section):
    name: str = Field("kernelswarm", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    out_dir: Path = Path("runs")  # run folders are created under it
    seed: int = 0


# The kernel languages a config may name: those with a LanguageSpec (kernelswarm.search.SPECS).
LanguageName = Literal[LANGUAGES]  # type: ignore[valid-type]


class TaskSection(_Section):
    name: str = "silu_and_mul"  # a built-in task name, or a path to a task folder
    language: LanguageName = "cpp"


class SearchSection(StrategyOptions):  # type: ignore[misc, valid-type]
    """``[search]``; the tables ``[search.<strategy>]`` of each strategy's own options come from
    the strategies (``StrategyOptions``, strategy_tables.py)."""

    lineages: int = Field(4, ge=1, le=1024)
    # Several kernel languages in one population: lineage i searches languages[i % n], each from
    # the task's starting kernel in it; None: every lineage searches task.language.
    languages: list[LanguageName] | None = Field(None, min_length=1)  # type: ignore[valid-type]
    candidates_per_lineage: int = Field(12, ge=1)
    # per lineage, counted from the search's start: once the starting kernels are judged (the
    # run's start-up before it, Ray, calibration and their verdicts, is reported apart)
    wall_time_s: float | None = Field(None, gt=0)
    gpu_time_s: float | None = Field(None, gt=0)  # per lineage: seconds on evaluation workers
    tokens: int | None = Field(None, ge=1)  # per lineage: model tokens of its roles
    cost_usd: float | None = Field(None, gt=0)  # per lineage: model spending
    patience: int | None = Field(None, ge=1)  # stop a lineage after this many steps without gain
    target_speedup: float | None = Field(None, gt=1.0)
    elites: int = Field(8, ge=1)
    migration_interval: int = Field(4, ge=1)  # a lineage receives migrants every N steps
    migration_count: int = Field(2, ge=1)
    migration_topology: Literal["ring", "all", "random"] = "ring"
    # How the population keeps, selects and shares kernels (search/strategies/).
    strategy: Literal[STRATEGIES] = "islands"  # type: ignore[valid-type]
    # Source similarity at or above which a coder's candidate is not judged; 1.0: only copies
    # that differ in comments and layout; 0: off.
    novelty: float = Field(0.0, ge=0.0, le=1.0)
    max_repairs: int = Field(2, ge=0)  # fixes of a failed coder candidate before moving on
    # Screening (search/screening.py): a candidate is timed on this many representative shapes
    # first, and on the others only if it could beat its lineage's best on one of them; 0: off.
    screen_shapes: int = Field(0, ge=0)
    tester: bool = True  # the agent's tester adds checks (size 1, odd sizes, large values)
    # After the search, the best kernels are judged again and the best median is reported (a
    # search's fastest measurement is a lucky one); 0 in either turns that off.
    confirm_top: int = Field(2, ge=0)
    confirm_repeats: int = Field(3, ge=0)
    # Lineages of a language torch.compile writes code in (triton on a GPU, cpp on the CPU)
    # judge Inductor's own kernel for the task's reference first, and go on from it where it is
    # faster than the task's starting kernel (evaluators/starts/generated_starts.py).
    compile_start: bool = False

    @field_validator("languages")
    @classmethod
    def _languages_shared_out(cls, value: list[str] | None,
                              info: ValidationInfo) -> list[str] | None:
        if value is None:
            return value
        if len(set(value)) != len(value):
            repeated = sorted({v for v in value if value.count(v) > 1})
            raise ValueError(f"lists {', '.join(repeated)} more than once; name each language "
                             f"once (lineages are shared among them in turn)")
        lineages = info.data.get("lineages")  # absent when search.lineages itself is invalid
        if lineages is not None and lineages < len(value):
            raise ValueError(f"{len(value)} languages need at least {len(value)} lineages, one "
                             f"each (search.lineages = {lineages})")
        return value


class LLMRoleSection(_Section):
    """One role's model settings (``[agent.llm]`` for every role, ``[agent.<role>]`` per role);
    a key left out takes the ``[agent.llm]`` value, then the default."""

    model: str | None = Field(None, min_length=1)
    base_url: str | None = Field(None, pattern=r"^https?://")  # None: OpenAI's endpoint
    api_key_env: str | None = None  # the variable's name, never the key; "" for no key
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)
    timeout_s: float | None = Field(None, gt=0)
    max_retries: int | None = Field(None, ge=0, le=20)

    @field_validator("api_key_env")
    @classmethod
    def _key_variable(cls, value: str | None) -> str | None:
        # The value is never echoed: a key pasted here by mistake must not reach a log.
        if value is None or value == "":
            return value
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError("must be the name of an environment variable (letters, digits, _), "
                             "not the key itself")
        from kernelswarm.evaluators import is_secret_name

        if not is_secret_name(value):
            raise ValueError("names a variable the sandbox would pass on to candidate code; "
                             "use a name containing KEY or TOKEN (e.g. MY_LLM_API_KEY)")
        return value


class PriceSection(_Section):
    prompt: float = Field(ge=0)  # US dollars per million prompt tokens
    completion: float = Field(ge=0)  # US dollars per million completion tokens


LLM_ROLES = ("planner", "coder", "tester", "analyst")
_ROLE_DEFAULTS = {"api_key_env": "OPENAI_API_KEY", "temperature": 0.2, "max_tokens": 4096,
                  "timeout_s": 120.0, "max_retries": 4}


class AgentSection(_Section):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    kind: Literal["builtin", "llm"] = "builtin"
    llm: LLMRoleSection = LLMRoleSection()  # defaults for every role
    planner: LLMRoleSection = LLMRoleSection()
    coder: LLMRoleSection = LLMRoleSection()
    tester: LLMRoleSection = LLMRoleSection()
    analyst: LLMRoleSection = LLMRoleSection()
    prices: dict[str, PriceSection] = {}  # model name -> $ per 1M tokens
    max_format_retries: int = Field(2, ge=0, le=10)  # re-asks after a malformed answer
    prompt_dir: Path | None = None  # templates overriding the built-in ones, by file name
    backoff_s: float = Field(1.0, gt=0)  # first wait before retrying a call; doubles, jittered
    backoff_max_s: float = Field(30.0, gt=0)

    @field_validator("llm", *LLM_ROLES, "prices", "prompt_dir")
    @classmethod
    def _only_for_llm(cls, value: Any, info: ValidationInfo) -> Any:
        if info.data.get("kind") == "builtin" and value not in (LLMRoleSection(), {}, None):
            raise ValueError("only used when agent.kind = \"llm\"")
        if info.field_name in LLM_ROLES and info.data.get("kind") == "llm":
            shared = info.data.get("llm")  # absent when [agent.llm] itself is invalid
            if value.model is None and shared is not None and shared.model is None:
                raise ValueError(f"no model: set agent.{info.field_name}.model, or agent.llm.model "
                                 f"for every role")
        if info.field_name == "prompt_dir" and value is not None:
            from kernelswarm.agents import TemplateError, load_templates

            try:
                load_templates(value.expanduser())
            except TemplateError as exc:
                raise ValueError(str(exc)) from None
        return value

    def role(self, name: str) -> dict[str, Any]:
        """The settings of role ``name``: its own keys, then ``[agent.llm]``'s, then defaults."""
        own, shared = getattr(self, name).model_dump(), self.llm.model_dump()
        return {key: own[key] if own[key] is not None else
                shared[key] if shared[key] is not None else _ROLE_DEFAULTS.get(key)
                for key in own}


class EvaluatorSection(_Section):
    device: Literal["cpu", "cuda"] = "cpu"
    workers: int | Literal["auto"] = "auto"  # auto: one per GPU (cuda), one (cpu)
    compile_timeout_s: float = Field(60.0, gt=0)
    run_timeout_s: float = Field(30.0, gt=0)
    seeds: int = Field(3, ge=1)
    check_heldout: bool = True
    cache_dir: Path | None = None  # default: $KERNELSWARM_CACHE or ~/.cache/kernelswarm/compile
    memory_limit_mb: int | None = Field(None, ge=256)  # cpu only
    cuda_arch: str | None = Field(None, pattern=r"^(sm_)?\d+\.?\d*a?$")  # None: nvidia-smi
    # torch.profiler kernel list per shape (GPU); unset: on with the LLM agent, whose roles read
    # it, off with the built-in one (starting the profiler costs a runner about 4 s on an H200)
    profile_kernels: bool | None = None
    ncu: bool = False  # Nsight Compute metrics on the largest shape (GPU; slow)
    ncu_timeout_s: float = Field(120.0, gt=0)

    @field_validator("workers")
    @classmethod
    def _workers_positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError("must be >= 1 or \"auto\"")
        return value


class TimingSection(_Section):
    warmup: int = Field(3, ge=0)
    min_repeats: int = Field(10, ge=1)
    max_repeats: int = Field(200, ge=1)
    target_rel_se: float = Field(0.005, gt=0, lt=1)
    budget_s: float = Field(1.0, gt=0)  # per shape
    flush_cache: bool = True
    cuda_graph_below_us: float = Field(1000.0, ge=0)  # GPU: replay a CUDA graph below this time

    @field_validator("max_repeats")
    @classmethod
    def _repeats_ordered(cls, value: int, info: ValidationInfo) -> int:
        if value < info.data.get("min_repeats", 1):
            raise ValueError(f"must be >= timing.min_repeats ({info.data['min_repeats']})")
        return value


class ClusterSection(_Section):
    address: str | None = None  # a Ray address; default: $RAY_ADDRESS, else a local instance
    num_cpus: int | None = Field(None, ge=1)  # for a local instance only


class TrackingSection(_Section):
    mlflow_uri: str = "sqlite:///mlflow.db"  # relative sqlite paths are from the working folder
    experiment: str | None = None  # default: the run name
    mlflow: bool = True  # Parquet is always written: it is the source of truth


class Config(_Section):
    """The whole configuration of a run."""

    run: RunSection = RunSection()
    task: TaskSection = TaskSection()
    search: SearchSection = SearchSection()
    agent: AgentSection = AgentSection()
    evaluator: EvaluatorSection = EvaluatorSection()
    timing: TimingSection = TimingSection()
    cluster: ClusterSection = ClusterSection()
    tracking: TrackingSection = TrackingSection()

    @model_validator(mode="before")
    @classmethod
    def _language_from_languages(cls, data: Any) -> Any:
        """With ``search.languages`` and no ``task.language``, the task's language is the first
        listed (the run's reference language), so that a saved config reads back the same."""
        if not isinstance(data, dict):
            return data
        search, task = data.get("search"), data.get("task", {})
        languages = search.get("languages") if isinstance(search, dict) else None
        if isinstance(languages, list) and languages and isinstance(task, dict) \
                and "language" not in task:
            data = {**data, "task": {**task, "language": languages[0]}}
        return data

    @model_validator(mode="after")
    def _languages_agree(self) -> Config:
        languages = self.search.languages
        if languages is None:
            return self
        if self.task.language not in languages:
            # Raised as a ValueError, it would read as a problem of no key: _describe shows this
            # message as it is, and it names both keys.
            raise ValueError(
                f"task.language = {self.task.language!r} is not one of search.languages "
                f"({', '.join(languages)}): leave task.language out (the first of "
                f"search.languages is used), or list it in search.languages")
        return self

    @model_validator(mode="after")
    def _compile_start_has_a_language(self) -> Config:
        if self.search.compile_start and not self.compile_start_languages():
            writes = ", ".join(f"{n} on {s.inductor_device}" for n, s in SPECS.items()
                               if s.inductor_device)
            raise ValueError(
                f"search.compile_start: torch.compile writes code in {writes}; none of the "
                f"run's languages ({', '.join(self.languages)}) is one on evaluator.device = "
                f"{self.evaluator.device!r}: add it to search.languages, or leave "
                f"search.compile_start out")
        return self

    def compile_start_languages(self) -> tuple[str, ...]:
        """The run's languages whose lineages start from torch.compile's kernel (with
        ``search.compile_start``): those Inductor writes code in on the evaluator's device."""
        if not self.search.compile_start:
            return ()
        return tuple(n for n in self.languages
                     if SPECS[n].inductor_device == self.evaluator.device)

    @property
    def languages(self) -> tuple[str, ...]:
        """The kernel languages the run searches, the reference language first: lineage ``i``
        searches ``languages[i % len(languages)]``."""
        return tuple(self.search.languages or (self.task.language,))

    def lineage_language(self, lineage: int) -> str:
        """The kernel language lineage ``lineage`` searches."""
        return self.languages[lineage % len(self.languages)]

    def task_path(self) -> Path:
        """The task folder: a built-in name, or a path relative to the working folder."""
        builtin = BUILTIN_TASKS / self.task.name
        if (builtin / "task.py").is_file():
            return builtin
        path = Path(self.task.name).expanduser()
        if path.is_dir() or path.name == "task.py":
            return path.resolve()
        names = ", ".join(sorted(p.name for p in BUILTIN_TASKS.iterdir() if (p / "task.py").is_file()))
        raise ConfigError(f"task.name: {self.task.name!r} is neither a built-in task ({names}) "
                          f"nor a task folder")

    def flat(self) -> dict[str, Any]:
        """``section.key -> value`` for logging as parameters; with the LLM agent, ``agent.<role>``
        is the role's settings as its requests carry them (shared keys and defaults filled in)."""
        out = {}
        for section, values in self.model_dump(mode="json").items():
            for key, value in values.items():
                out[f"{section}.{key}"] = value
        if self.agent.kind == "llm":  # each role's model settings as sent, defaults filled in
            shared = self.agent.llm.model_dump()
            out["agent.llm"] = {k: v if v is not None else _ROLE_DEFAULTS.get(k)
                                for k, v in shared.items()}
            for role in LLM_ROLES:
                out[f"agent.{role}"] = self.agent.role(role)
        return out


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word is a string: --set task.name=softmax


def _key_path(dotted: str, item: str) -> list[str]:
    """The keys of a dotted TOML key (``agent.llm.base_url``, ``agent.prices."gpt-4.1".prompt``)."""
    try:
        nested: Any = tomllib.loads(f"{dotted} = 0")
    except tomllib.TOMLDecodeError:
        raise ConfigError(f"--set {item!r}: {dotted!r} is not a key; write section.key or a "
                          f"deeper dotted key such as agent.llm.base_url (quote a part holding a "
                          f"dot: agent.prices.\"gpt-4.1\".prompt)") from None
    path = []
    while isinstance(nested, dict):
        (key, nested), = nested.items()
        path.append(key)
    return path


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``KEY=VALUE`` overrides: KEY a dotted key at any depth (``search.lineages``,
    ``agent.llm.base_url``), VALUE in TOML syntax (a bare word is a string)."""
    _apply(data, overrides)
    return data


def _apply(data: dict[str, Any], overrides: list[str]) -> dict[str, str]:
    """Apply the overrides to ``data``; the dotted key each one set, mapped to it as typed."""
    written = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. search.lineages=8")
        dotted, text = item.split("=", 1)
        path = _key_path(dotted.strip(), item)
        if len(path) < 2:
            raise ConfigError(f"--set {item!r}: KEY must name a key inside a section, e.g. "
                              f"search.lineages; sections: {', '.join(Config.model_fields)}")
        table = data
        for depth, key in enumerate(path[:-1]):
            table = table.setdefault(key, {})
            if not isinstance(table, dict):
                raise ConfigError(f"--set {item!r}: {'.'.join(path[:depth + 1])} is a value, "
                                  f"not a table of keys")
        table[path[-1]] = _parse_value(text.strip())
        written[".".join(path)] = item
    return written


def _validated(data: dict[str, Any], path: Path | str, overrides: list[str] | None) -> Config:
    written = _apply(data, overrides or [])
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe(exc, Config, str(path), written)) from None


def validate_config(data: dict[str, Any], where: str) -> Config:
    """A configuration given as nested tables (what a TOML file holds), validated;
    ``ConfigError`` names ``where`` (e.g. a sweep's cell) and the key."""
    return _validated(data, where, None)


def load_run_config(run_dir: str | Path, overrides: list[str] | None = None) -> Config:
    """The configuration a run folder was started with (``config.json``), with overrides."""
    path = Path(run_dir) / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{run_dir}: not a kernelswarm run folder (no config.json)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    return _validated(stored_form(data), path, overrides)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read, override and validate a configuration (the quickstart when ``path`` is None)."""
    path = Path(path) if path is not None else QUICKSTART
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    config = _validated(data, path, overrides)
    if config.cluster.address is None and os.environ.get("RAY_ADDRESS"):
        config = config.model_copy(update={"cluster": ClusterSection(
            address=os.environ["RAY_ADDRESS"], num_cpus=config.cluster.num_cpus)})
    return config
