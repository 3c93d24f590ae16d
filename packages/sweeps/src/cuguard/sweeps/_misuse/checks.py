"""The rules the misuse sweep checks after every step, as pure functions over what it observed.

After each call (see :meth:`cuguard.sweeps._misuse.session.Session.perform`):

- **E3** only ``TypeError``, ``ValueError``, ``ResourceClosedError``,
  ``BufferError`` or ``CUDAError`` (and subclasses) escape, with a message; a
  parameter that takes a cuguard object and got another kind of value raises
  ``TypeError`` naming the parameter, the expected kind and what was given (no
  driver call, no other exception, never a success); a closed object is refused
  with ``ResourceClosedError`` naming it (E1: a ``CUDAError`` names its call and
  status).
- **O3** an object of a driver that is not installed is refused, ``close()``
  included, with ``ResourceClosedError`` saying so; **O4** so is an object of a
  context cuguard destroyed.
- **S2** the simulator recorded no misuse, double release or use after release,
  no ``SimulatedCrash`` escaped (from the call, a destructor, a callback or the
  driver's thread), and nothing reached ``sys.unraisablehook`` except the
  sweep's own callback exceptions (W6); **W5** nothing dangles; **O5** no driver
  call from a host function.
- **G1** a call that raised left no driver object behind (except what its
  message says was leaked, and handles whose release failed).
- **G2** the thread's current context is the one it had before the call (except
  ``set_current()``, a C2 failure that says so, or a current context the call
  destroyed).
- **W1/W4/O5/O6** no ``CUDAWarning`` when nothing failed; never one about
  ``CUDA_ERROR_DEINITIALIZED``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cuguard.errors import CUDAError, ResourceClosedError, format_handle

__all__ = [
    "ALLOWED",
    "MisuseViolation",
    "WrongArg",
    "exception_problems",
    "g2_problem",
    "warning_problems",
]

#: The exception types a cuguard call may raise (E3), besides those an operation documents.
ALLOWED: tuple[type[BaseException], ...] = (TypeError, ValueError, ResourceClosedError, BufferError, CUDAError)

_RULE_OF_REASON = {"stale": "O3", "stale+": "O3", "destroyed": "O4", "closed": "E3"}
_LABEL = re.compile(r"\b(dev|ctx|s|ev|buf|pin|mod|k|cfg|g|n|x|fs|view|o)\d+\b")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_NUM = re.compile(r"\b\d{3,}\b")


@dataclass(frozen=True)
class MisuseViolation:
    """One broken rule: the contract clause, the operation, what happened, and where.

    ``trace`` holds the steps of the example up to this one (a reproducer);
    ``example`` and ``step`` number them.
    """

    rule: str
    op: str
    detail: str
    example: int = 0
    step: int = 0
    trace: tuple[str, ...] = field(default=(), compare=False)

    def key(self) -> tuple[str, str, str]:
        """What makes two violations the same defect: the rule, the operation and the detail without handles."""
        detail = _NUM.sub("N", _HEX.sub("0x_", _LABEL.sub(r"\1_", self.detail)))
        return (self.rule, self.op, detail)

    def __str__(self) -> str:
        return f"[{self.rule}] {self.op}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "op": self.op,
            "detail": self.detail,
            "example": self.example,
            "step": self.step,
            "trace": list(self.trace),
        }


@dataclass(frozen=True)
class WrongArg:
    """A parameter given a value of a kind it does not take."""

    param: str
    spellings: tuple[str, ...]
    expect: str
    value: Any
    naming: bool = True  # the TypeError must name the parameter, the kind and the value

    def given(self) -> tuple[str, ...]:
        """Ways a message may say what was given: the type's name, or the value's repr."""
        value = self.value
        names = ["None"] if value is None else [type(value).__name__]
        with contextlib.suppress(Exception):  # a repr that fails names nothing
            names.append(repr(value))
        return tuple(names)

    def named_by(self, text: str) -> bool:
        lowered = text.lower()
        if not any(s.lower() in lowered for s in self.spellings):
            return False
        if self.expect and self.expect.lower() not in lowered:
            return False
        if type(self.value).__name__ == "BadStream":  # a malformed protocol result is named, not the object
            return True
        return any(g in text for g in self.given())


def _text(exc: BaseException) -> str:
    return "\n".join([str(exc), *getattr(exc, "__notes__", [])])


def describe(exc: BaseException) -> str:
    """``Type: message`` on one line (for reports)."""
    return f"{type(exc).__name__}: {_text(exc)}".replace("\n", " | ")[:300]


def exception_problems(  # noqa: PLR0917 - every input of the rule in one place
    exc: BaseException | None,
    wrong: list[WrongArg],
    unusable: list[tuple[str, tuple[str, ...], str]],
    fault_active: bool,
    extra_errors: tuple[type[BaseException], ...],
    unusable_unused: bool = False,
) -> list[tuple[str, str]]:
    """E3, E1, O3, O4: what the call raised, given the wrong arguments and unusable objects it got.

    ``unusable`` lists ``(label, class names, reason)`` of the objects the call
    uses that must refuse use (the names a refusal may give: the object's class,
    or its cause's, e.g. the module of a kernel). Returns ``(rule, detail)`` pairs.
    """
    problems: list[tuple[str, str]] = []
    if exc is None:
        for w in wrong:
            problems.append(("E3", f"parameter {w.param} accepted {_given(w)} (a {w.expect} is taken)"))
        for label, names, reason in unusable:
            problems.append(
                (_RULE_OF_REASON[reason], f"{label} ({names[0]}, {_REASON[reason]}) was used and the call succeeded")
            )
        return problems
    if not isinstance(exc, (*ALLOWED, *extra_errors)):
        problems.append(("E3", f"raised an undocumented exception type: {describe(exc)}"))
        return problems
    text = str(exc)
    if not text.strip():
        problems.append(("E3", f"raised {type(exc).__name__} with an empty message"))
    if isinstance(exc, CUDAError) and (exc.name not in text or (exc.call and exc.call not in text)):
        problems.append(("E1", f"the message does not name the call and the status: {describe(exc)}"))
    if wrong:
        naming = [w for w in wrong if w.naming]
        if isinstance(exc, TypeError):
            if naming and not any(w.named_by(text) for w in naming):
                w = naming[0]
                problems.append(
                    (
                        "E3",
                        f"the TypeError for {w.param}={_given(w)} does not name the parameter ({w.param}), the "
                        f"expected kind ({w.expect}) and what was given ({w.given()[0]}): {text[:200]!r}",
                    )
                )
        elif isinstance(exc, ResourceClosedError) and unusable:
            pass  # refusing the unusable object first is as good
        elif isinstance(exc, CUDAError) and fault_active:
            pass  # an injected failure of a call made before the check; wrong kinds still must not pass
        elif not naming and extra_errors and isinstance(exc, extra_errors):
            pass  # a kernel argument that does not fit need only be refused before the launch: a state refusal is
        else:
            w = wrong[0]
            problems.append(
                ("E3", f"{w.param}={_given(w)} (a {w.expect} is taken) raised {describe(exc)} instead of TypeError")
            )
        return problems
    if unusable:
        if isinstance(exc, ResourceClosedError):
            if not any(name in text for _, names, _ in unusable for name in names):
                label, names, _ = unusable[0]
                problems.append(
                    ("E3", f"the ResourceClosedError for {label} does not name the {names[0]}: {text[:200]!r}")
                )
            stale = [u for u in unusable if u[2] == "stale"]
            if stale and len(stale) == len(unusable) and "installed" not in text:
                problems.append(
                    ("O3", f"the refusal of {stale[0][0]} does not say its driver is not installed: {text!r}")
                )
        elif isinstance(exc, CUDAError) and not fault_active:
            label, names, reason = unusable[0]
            detail = f"{label} ({names[0]}, {_REASON[reason]}) reached the driver: {describe(exc)}"
            problems.append((_RULE_OF_REASON[reason], detail))
    return problems


_REASON = {
    "stale": "of a driver that is not installed",
    "stale+": "closed, of a driver that is not installed",
    "destroyed": "of a context cuguard destroyed",
    "closed": "closed",
}


def _given(w: WrongArg) -> str:
    text = w.given()[-1]
    return text if len(text) < 50 else w.given()[0]


def g2_problem(  # noqa: PLR0917
    before: int,
    after: int,
    exc: BaseException | None,
    sets_context: bool,
    before_destroyed: bool,
    restore_refused: bool,
) -> tuple[str, str] | None:
    """G2 (and C2's message): the current context after a call is the one it had before."""
    if after == before:
        return None
    if sets_context and exc is None:
        return None
    if before_destroyed or restore_refused:
        return None
    text = "" if exc is None else _text(exc)
    if "could not be restored" in text:
        now = "no context" if after == 0 else format_handle(after)
        if now not in text:
            return ("C2", f"the message does not name the context now current ({now}): {text[:200]!r}")
        return None
    was = "no context" if before == 0 else format_handle(before)
    now = "no context" if after == 0 else format_handle(after)
    how = "returned" if exc is None else f"raised {describe(exc)}"
    return ("G2", f"the current context changed from {was} to {now} (the call {how})")


def warning_problems(messages: Iterable[str], fault_active: bool, may_warn: bool, rule: str) -> list[tuple[str, str]]:
    """W4 and spurious reports: ``CUDAWarning`` messages issued during a step."""
    problems: list[tuple[str, str]] = []
    for text in messages:
        if "CUDA_ERROR_DEINITIALIZED" in text:
            problems.append(("W4", f"reported a DEINITIALIZED failure: {text[:200]}"))
            continue
        if fault_active or may_warn or "closed before it" in text or "was closed first" in text:
            continue
        problems.append((rule, f"a CUDAWarning although nothing failed: {text[:200]}"))
    return problems
