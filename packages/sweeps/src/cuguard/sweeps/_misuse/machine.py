"""The misuse sweep as a hypothesis state machine, and its seeded ``random`` fallback.

:func:`run_hypothesis` runs :class:`~cuguard.sweeps._misuse.session.Session`
examples as a :class:`hypothesis.stateful.RuleBasedStateMachine`: one
``initialize`` rule (the set-up), one ``step`` rule (a step kind drawn by
weight, see :mod:`~cuguard.sweeps._misuse.steps`) and the tear-down. With
``shrink`` the first example that breaks a rule fails, hypothesis shrinks it
and the minimal example's violations are returned; otherwise every example
runs and every violation is collected. Without a seed the run is derandomized
(the same examples every time).

:func:`run_random` runs the same sessions with choices from
``random.Random`` (no hypothesis needed: the GPU machine has none).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cuguard.sweeps._misuse.checks import MisuseViolation
from cuguard.sweeps._misuse.choices import RandomChooser
from cuguard.sweeps._misuse.session import Session

__all__ = ["Sink", "hypothesis_available", "run_hypothesis", "run_random"]


@dataclass
class Sink:
    """What the examples of one run found."""

    driver: str
    strict: bool = False
    examples: int = 0
    steps: int = 0
    violations: list[MisuseViolation] = field(default_factory=list)
    failing: list[MisuseViolation] = field(default_factory=list)  # the violations of the last failing example
    progress: Callable[[str], None] | None = None
    #: what the examples exercised: captures in progress by mode, stream kind and thread, the second thread's acts
    exercised: Counter[str] = field(default_factory=Counter)
    stopped: bool = False  # a step hung: the run stopped after that example

    def absorb(self, session: Session) -> None:
        """Take what a finished example exercised; stop the run after a hang."""
        self.exercised.update(session.exercised)
        if session.hung:
            self.stopped = True


def hypothesis_available() -> bool:
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        return False
    return True


def render(violations: list[MisuseViolation]) -> str:
    """The violations of one example with the trace up to the first of them (a reproducer)."""
    lines = [f"{len(violations)} misuse-sweep violation(s):"]
    lines.extend(f"  {v}" for v in violations[:20])
    lines.append("steps of the example (cuguard calls; '!!' marks what they raised):")
    lines.extend(f"  {line}" for line in violations[0].trace)
    return "\n".join(lines)


def run_hypothesis(
    sink: Sink, *, examples: int, steps: int, seed: int | None, shrink: bool, callbacks_calling_cuguard: bool = True
) -> None:
    """Run ``examples`` examples of up to ``steps`` steps as a hypothesis state machine (see the module)."""
    import hypothesis.strategies as st
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis import seed as use_seed
    from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test, initialize, rule

    class HypothesisChooser:
        def __init__(self, data: Any) -> None:
            self.data = data

        def integer(self, lo: int, hi: int) -> int:
            return int(self.data.draw(st.integers(lo, hi)))

    class MisuseMachine(RuleBasedStateMachine):
        """The misuse sweep (contract B6): every step of an example checked (see the package docstring)."""

        def __init__(self) -> None:
            super().__init__()
            self.session: Session | None = None
            self.mark = 0

        @initialize(data=st.data())
        def begin(self, data: Any) -> None:
            if sink.stopped:
                return  # an earlier example hung: a thread of it may hold a lock every example needs
            sink.examples += 1
            self.session = Session(
                sink.driver,
                HypothesisChooser(data),
                sink.examples,
                callbacks_calling_cuguard=callbacks_calling_cuguard,
            )
            self.session.setup()
            self.publish()

        @rule(data=st.data())
        def step(self, data: Any) -> None:
            if self.session is None or self.session.hung:
                return
            self.session.ch = HypothesisChooser(data)
            sink.steps += 1
            self.session.step()
            self.publish()

        def teardown(self) -> None:
            if self.session is not None:
                session, self.session = self.session, None
                session.finish()
                sink.absorb(session)
                self.publish(session)
                if sink.progress is not None and sink.examples % 5 == 0:
                    sink.progress(f"{sink.examples} examples, {sink.steps} steps, {len(sink.violations)} violations")

        def publish(self, session: Session | None = None) -> None:
            session = session or self.session
            assert session is not None
            new = session.violations[self.mark :]
            self.mark = len(session.violations)
            if not new:
                return
            sink.violations.extend(new)
            if sink.strict:
                sink.failing = list(session.violations)
                raise AssertionError(render(new))

    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]
    config = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=seed is None,
        suppress_health_check=list(HealthCheck),
        phases=phases,
        print_blob=False,
        report_multiple_bugs=False,
    )
    sink.strict = shrink
    test = get_state_machine_test(MisuseMachine, settings=config)
    if seed is not None:
        test = use_seed(seed)(test)
    try:
        test()
    except AssertionError:
        if not shrink:
            raise


def run_random(
    sink: Sink, *, examples: int, steps: int, seed: int | None, first: int = 0, callbacks_calling_cuguard: bool = True
) -> None:
    """Run ``examples`` examples of ``steps`` steps with choices from ``random.Random`` (seeded)."""
    base = 0 if seed is None else seed
    for i in range(first, first + examples):
        rng = random.Random(f"cuguard-misuse-{base}-{i}")
        sink.examples += 1
        session = Session(sink.driver, RandomChooser(rng), i + 1, callbacks_calling_cuguard=callbacks_calling_cuguard)
        try:
            session.setup()
            for _ in range(steps):
                if session.hung:
                    break
                sink.steps += 1
                session.step()
        finally:
            session.finish()
            sink.absorb(session)
            sink.violations.extend(session.violations)
        if sink.stopped:
            break
        if sink.progress is not None and (i + 1) % 5 == 0:
            sink.progress(f"{sink.examples} examples, {sink.steps} steps, {len(sink.violations)} violations")
