"""A strategy's own settings, declared by the strategy: name, type, default, bounds, help.

A strategy lists its ``Option`` s in its class's ``options``, as an Optuna sampler's constructor
lists its arguments. The configuration reads them from there (each strategy's options are its
``[search.<strategy>]`` table, validated by ``Option.check`` and documented by ``help``), and the
strategy reads the values it is handed (``Population.options``) through the same check, so a
new strategy needs no edit of the configuration schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
          list: "a list"}


@dataclass(frozen=True)
class Option:
    """One setting of a strategy. Immutable; ``check`` is the only validation of its values.

    - ``kind``: ``bool``, ``int``, ``float``, ``str``, or ``list`` (of strings);
    - ``minimum`` / ``maximum``: the least and greatest value of a number, the fewest and most
      items of a list (None: no bound);
    - ``choices``: the allowed strings of a ``str``, the allowed items of a ``list`` (each at
      most once); empty: any string;
    - ``help``: what it does, as docs/configuration.md states it.

    A list's default is a tuple, as ``check`` returns every list.
    """

    name: str
    kind: type
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise TypeError(f"option {self.name}: kind must be one of "
                            f"{', '.join(k.__name__ for k in _KINDS)}, got {self.kind!r}")
        try:
            self.check(self.default)
        except ValueError as exc:
            raise ValueError(f"option {self.name}: its default {self.default!r} {exc}") from None

    def check(self, value: Any) -> Any:
        """``value`` as the strategy reads it (a list as a tuple, an integer as a float where
        a number is asked for); ``ValueError`` saying what is allowed where it is not."""
        if not self._of_kind(value):
            raise ValueError(f"must be {self.allowed()}")
        if self.kind is list:
            value = tuple(value)
            repeated = sorted({item for item in value if value.count(item) > 1})
            if repeated:
                raise ValueError(f"names {', '.join(repeated)} more than once; must be "
                                 f"{self.allowed()}")
        if self.choices and any(item not in self.choices
                                for item in (value if self.kind is list else (value,))):
            raise ValueError(f"must be {self.allowed()}")
        size = len(value) if self.kind is list else value
        if self.kind is not bool and self.kind is not str and (
                (self.minimum is not None and size < self.minimum)
                or (self.maximum is not None and size > self.maximum)):
            raise ValueError(f"must be {self.allowed()}")
        return float(value) if self.kind is float else value

    def _of_kind(self, value: Any) -> bool:
        if self.kind is list:
            return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        if self.kind is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if self.kind is int:
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, self.kind)

    def allowed(self) -> str:
        """The values allowed, in words: ``an integer >= 1``, ``a list of some of a, b (at
        least 1, each once)``."""
        if self.kind is list:
            items = f"some of {', '.join(self.choices)}" if self.choices else "strings"
            bounds = [f"at least {self.minimum:g}"] if self.minimum is not None else []
            bounds += [f"at most {self.maximum:g}"] if self.maximum is not None else []
            return f"a list of {items} ({', '.join([*bounds, 'each once'])})"
        if self.kind is str and self.choices:
            return f"one of {', '.join(self.choices)}"
        words = _KINDS[self.kind]
        if self.kind in (int, float):
            if self.minimum is not None and self.maximum is not None:
                return f"{words} from {self.minimum:g} to {self.maximum:g}"
            if self.minimum is not None:
                return f"{words} >= {self.minimum:g}"
            if self.maximum is not None:
                return f"{words} <= {self.maximum:g}"
        return words
