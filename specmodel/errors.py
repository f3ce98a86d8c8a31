"""The one exception type that user-facing commands turn into one line and exit 2, and how the
library names an input field in what it says (:class:`FieldError`, :func:`field_name`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class SpecmodelError(Exception):
    """Bad input from the user (a flag, a file, a field).

    The message must name the file/field and say what is wrong; the CLI prints
    ``specmodel: error: <message>`` and exits with :data:`EXIT_USAGE`.
    """


#: ``{field}`` in a :class:`FieldError` detail: another input the message refers to; ``{{``: a
#: literal brace (:func:`verbatim`)
_REF = re.compile(r"\{([a-z][a-z0-9_]*)\}|\{\{")


def verbatim(text: object) -> str:
    """``text`` (a value the user gave: a path, a selector) as a :class:`FieldError` detail shows it
    as it is: its braces are never read as ``{field}`` references."""
    return str(text).replace("{", "{{")


def spell(text: str, name_of: Callable[[str], str] | None = None) -> str:
    """``text`` with each ``{field}`` reference spelled by ``name_of`` (default :func:`field_name`:
    the running front end's names, the CLI's flags) and each ``{{`` as one brace."""
    name = name_of or field_name
    return _REF.sub(lambda m: name(m.group(1)) if m.group(1) else "{", text)


class FieldError(SpecmodelError):
    """Bad value of one named input (a :class:`~specmodel.scenario.args.ScenarioArgs` field, an API
    argument), raised below ``commands/``: it names the FIELD, never a command-line flag.

    ``detail`` may refer to other inputs as ``{name}``; :meth:`render` spells every name with
    ``name_of`` — the CLI passes its one field → flag table (:mod:`specmodel.commands.flags`),
    ``str()`` keeps the field names (what a Python caller passed). ``field`` None: a message
    about several inputs at once.
    """

    def __init__(self, field: str | None, detail: str) -> None:
        self.field = field
        self.detail = detail
        super().__init__(self.render())

    def __reduce__(self) -> tuple[type[FieldError], tuple[str | None, str]]:
        # (raised in a worker process and sent back: rebuilt from its two parts, not its message)
        return (FieldError, (self.field, self.detail))

    def render(self, name_of: Callable[[str], str] = str) -> str:
        text = spell(self.detail, name_of)
        return f"{name_of(self.field)}: {text}" if self.field else text

    def renamed(self, names: dict[str, str]) -> FieldError:
        """The same error with fields spelled as ``names`` says (the Python API's argument names)."""
        def sub(m: re.Match[str]) -> str:
            n = m.group(1)
            return "{" + names.get(n, n) + "}" if n else m.group(0)

        return FieldError(names.get(self.field, self.field) if self.field else None, _REF.sub(sub, self.detail))


#: how :func:`field_name` spells a field: the innermost of :func:`fields_named` (the field's own name
#: when none is active, as a Python caller passed it)
_NAMERS: list[Callable[[str], str]] = [str]


def field_name(field: str) -> str:
    """An input field (``draft_ms``) as the running front end names it in a note, a hint or a cost's
    origin: its own name from Python, the flag that sets it under the CLI (``--draft-ms``: ``cli.main``
    runs every command inside :func:`fields_named` with its one field -> flag table). The library
    names fields through this, never a command-line flag; :meth:`FieldError.render` does the same
    for an error, when it is shown."""
    return _NAMERS[-1](field)


@contextmanager
def fields_named(name_of: Callable[[str], str]) -> Iterator[None]:
    """:func:`field_name` spells fields with ``name_of`` inside the block (the process's threads too)."""
    _NAMERS.append(name_of)
    try:
        yield
    finally:
        _NAMERS.pop()


class FindingsFailed(Exception):
    """A check ran fine but found FAIL results (exit 1, so scripts can gate on it)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C after a command cleaned up: the message says what was stopped; the CLI prints it as
    its one line ``specmodel: interrupted: <message>`` (exit 130)."""


EXIT_USAGE = 2
EXIT_FINDINGS = 1


def require_finite(name: str, value: float, *, minimum: float | None = None,
                   maximum: float | None = None, strict_min: bool = False) -> float:
    """Validate one number from user input; raise :class:`SpecmodelError` naming ``name`` (a
    :class:`FieldError` when ``name`` is a field name, not a ``--flag``)."""
    import math

    def err(detail: str) -> SpecmodelError:
        return SpecmodelError(f"{name}: {detail}") if name.startswith("-") or " " in name else FieldError(name, detail)

    if isinstance(value, bool):
        raise err(f"expected a number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise err(f"expected a number, got {value!r}") from None
    if math.isnan(v) or math.isinf(v):
        raise err(f"must be a finite number, got {value!r}")
    if minimum is not None:
        if strict_min and v <= minimum:
            raise err(f"must be > {minimum:g}, got {v:g}")
        if not strict_min and v < minimum:
            raise err(f"must be >= {minimum:g}, got {v:g}")
    if maximum is not None and v > maximum:
        raise err(f"must be <= {maximum:g}, got {v:g}")
    return v
