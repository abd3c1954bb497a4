"""The option table: every option of a run declared once, as a field of a frozen option
object with its flag, environment variable, help and choices in the field's metadata
(:func:`opt`). From it come the command line of ``gossipgrad train`` and the benchmarks
(:mod:`gossipgrad.cli.options`), ``GOSSIPGRAD_*`` parsing for the command line and both
library faces (:func:`from_env`), the typing of ``--config`` files (:func:`value_error`)
and the options page of the docs (:func:`markdown`). PURE: stdlib only.

Precedence, one rule for every entry point: a flag or keyword argument > the
``GOSSIPGRAD_<OPTION>`` variable > a ``--config`` file (command line only) > the default.

An option a plugin needs is one entry too (:func:`register`): it then appears in
``--help``, is read from its variable and from config files, and reaches the exchange
options' ``extras``::

    >>> knob = register(Option("doc_knob", "extras", 3, "A plugin's knob.", int))
    >>> knob.env, from_env({"GOSSIPGRAD_DOC_KNOB": "7"}, [knob])
    ('GOSSIPGRAD_DOC_KNOB', {'doc_knob': 7})
    >>> unregister("doc_knob")
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


class OptionGroup:
    """Base of the frozen option objects: coerce a field in ``__post_init__``; build from a
    mapping that may hold other options too."""

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    @classmethod
    def pick(cls, flags: dict[str, Any]) -> dict[str, Any]:
        """The entries of ``flags`` that are this class's fields."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return {k: v for k, v in flags.items() if k in names}


def opt(
    default: Any,
    help: str | Callable[[], str],  # noqa: A002 - the word every option table uses
    *,
    flag: str | None = None,
    aliases: Sequence[str] = (),
    choices: Callable[[], Iterable[str]] | None = None,
    show_default: str | None = None,
    cli: bool = True,
    metavar: str | None = None,
) -> Any:
    """A dataclass field that is an option: ``default`` and what :class:`Option` holds.

    ``flag`` defaults to ``--name-with-dashes``; ``aliases`` are more spellings of the flag
    (``-b``); ``choices`` lists the valid values where a registry or enum decides them;
    ``cli=False`` keeps an option off the command line (it is still a keyword argument)."""
    meta = {
        "help": help,
        "flag": flag,
        "aliases": tuple(aliases),
        "choices": choices,
        "show_default": show_default,
        "cli": cli,
        "metavar": metavar,
    }
    return dataclasses.field(default=default, metadata={"option": meta})


@dataclasses.dataclass(frozen=True)
class Option:
    """One option, read off a field of an option object (or registered by a plugin).

    ``kind`` is how its text is read: ``bool``, ``int``, ``float``, ``str``, or an enum;
    ``help`` may be a function (text made from a registry when it is read)."""

    name: str
    group: str
    default: Any
    help: str | Callable[[], str]
    kind: Any = str
    flag: str | None = None
    aliases: tuple[str, ...] = ()
    choices: Callable[[], Iterable[str]] | None = None
    show_default: str | None = None
    cli: bool = True
    metavar: str | None = None
    optional: bool = False  # None is a value (the default rule decides)

    @property
    def text(self) -> str:
        """The help text."""
        return self.help() if callable(self.help) else self.help

    @property
    def flag_name(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        """Its ``GOSSIPGRAD_*`` variable."""
        return "GOSSIPGRAD_" + self.flag_name.lstrip("-").replace("-", "_").upper()

    def valid_choices(self) -> list[str] | None:
        """The values it takes, where they are a closed set (else None)."""
        if self.choices is not None:
            return list(self.choices())
        if isinstance(self.kind, type) and issubclass(self.kind, enum.Enum):
            return [str(e.value) for e in self.kind]
        return None

    def parse(self, text: str, where: str) -> Any:
        """``text`` (a variable's, a contender's setting) as this option's value;
        ValueError naming ``where`` and what a valid value looks like."""
        value = text.strip()
        if self.kind is bool:
            if value.lower() not in _TRUE | _FALSE:
                raise ValueError(f"{where}={text!r}: expected 1 or 0")
            return value.lower() in _TRUE
        if self.kind in (int, float):
            try:
                number = self.kind(value)
            except ValueError:
                raise ValueError(f"{where}={text!r}: expected {_a(self.kind)}") from None
            if isinstance(number, float) and not math.isfinite(number):
                raise ValueError(f"{where}={text!r}: expected a finite number")
            return number
        choices = self.valid_choices()
        if choices is not None and value not in choices:
            raise ValueError(f"{where}={text!r}: choose one of {', '.join(choices)}")
        return value

    def value_error(self, value: Any) -> str | None:
        """Why ``value`` (from a config file: typed by TOML or YAML) cannot be this
        option's, or None. Config files carry typed values that a command line would
        coerce silently (``int(1.5)`` is 1, ``int(True)`` is 1)."""
        got = f"{value!r} ({type(value).__name__})"
        if value is None and self.optional:
            return None
        if self.kind is bool:
            return None if isinstance(value, bool) else f"must be true or false, got {got}"
        if self.kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
            return None if ok else f"must be a whole number, got {got}"
        if self.kind is float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"must be a number, got {got}"
            return None if math.isfinite(value) else f"must be a finite number, got {value!r}"
        if not isinstance(value, str):
            return f"must be a string, got {got}"
        return None


def _a(kind: type) -> str:
    return "a whole number" if kind is int else "a number"


_EXTRAS: dict[str, Option] = {}


def register(option: Option) -> Option:
    """Add a plugin's option (group ``"extras"``: its value reaches
    ``ExchangeOptions.extras``); ValueError if the name is taken."""
    if option.name in _EXTRAS:
        raise ValueError(f"option {option.name!r} is already registered")
    _EXTRAS[option.name] = option
    return option


def unregister(name: str) -> None:
    """Remove a plugin's option (tests that registered a toy)."""
    _EXTRAS.pop(name, None)


def extras() -> list[Option]:
    """The options plugins registered, in registration order."""
    return list(_EXTRAS.values())


def _kind(hint: Any) -> tuple[Any, bool]:
    """The reading kind of a field's type hint, and whether None is a value."""
    args = typing.get_args(hint)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    if typing.get_origin(hint) is tuple:
        return str, optional  # a comma-separated list, parsed by the option object
    return hint, optional


def options_of(cls: type, group: str | None = None) -> list[Option]:
    """The options declared as fields of the option object ``cls`` (fields made with
    :func:`opt`), in field order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("option")
        if meta is None:
            continue
        kind, optional = _kind(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else None
        out.append(
            Option(
                f.name,
                group or cls.__name__,
                getattr(default, "value", default),
                meta["help"],
                kind,
                meta["flag"],
                meta["aliases"],
                meta["choices"],
                meta["show_default"],
                meta["cli"],
                meta["metavar"],
                optional or default is None,
            )
        )
    return out


def from_env(environ: Mapping[str, str], table: Iterable[Option]) -> dict[str, Any]:
    """The options of ``table`` that ``environ`` sets, parsed by kind (validated later,
    where the option objects are built); ValueError names a variable that cannot be read."""
    out = {}
    for option in table:
        text = environ.get(option.env)
        if text is not None and text.strip():
            out[option.name] = option.parse(text, option.env)
    return out


def markdown(options: Iterable[Option]) -> str:
    """The options as a markdown table: flag, variable, default, meaning."""
    rows = ["| flag | variable | default | meaning |", "|---|---|---|---|"]
    for o in options:
        if not o.cli:
            continue
        default = o.show_default or ("" if o.default is None else f"`{o.default}`")
        flags = ", ".join(f"`{f}`" for f in (o.flag_name, *o.aliases))
        rows.append(f"| {flags} | `{o.env}` | {default} | {o.text} |")
    return "\n".join(rows)
