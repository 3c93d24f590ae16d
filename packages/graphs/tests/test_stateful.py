"""B4/G3/G4/E3: random mutations of a GraphDefinition and of a plain Python model, compared after every step.

Some mutations run with injected driver failures (one or two fault plans, on the
forward calls or on the undo calls). The model predicts the exact outcome from
the documented algorithm: edges change one driver call each (removals first, then
additions), completed steps are undone in reverse, a failed undo leaves the state
the docstrings describe and adds one note; a failed node destroy leaks the node.
Invalid arguments must raise before any mutating driver call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from cuguard.errors import CUDAError, ResourceClosedError
from cuguard.graphs import GraphDefinition, Node
from cuguard.testing import inject, record_calls

ADD_NODE = "cuGraphAddEmptyNode"
ADD_EDGE = "cuGraphAddDependencies"
REMOVE_EDGE = "cuGraphRemoveDependencies"
DESTROY_NODE = "cuGraphDestroyNode"
MUTATING = frozenset({ADD_NODE, ADD_EDGE, REMOVE_EDGE, DESTROY_NODE})
FAULT_CODE = 2  # CUDA_ERROR_OUT_OF_MEMORY

Plan = tuple[str, int]

plans_st = st.lists(
    st.tuples(st.sampled_from(sorted(MUTATING)), st.integers(min_value=1, max_value=3)),
    max_size=2,
    unique_by=lambda p: p[0],
)


class Calls:
    """Which driver call of the modelled operation fails, given the fault plans."""

    def __init__(self, plans: list[Plan]) -> None:
        self.plans = plans
        self.counts: Counter[str] = Counter()

    def ok(self, fn: str) -> bool:
        self.counts[fn] += 1
        return not any(pfn == fn and nth == self.counts[fn] for pfn, nth in self.plans)


class Outcome:
    def __init__(self, error: type[BaseException] | None = None, notes: int = 0, driver_error: bool = False) -> None:
        self.error = error
        self.notes = notes
        self.driver_error = driver_error


def _has_cycle(edges: set[tuple[int, int]]) -> bool:
    """Whether the directed graph of ``edges`` has a cycle (Kahn's algorithm)."""
    nodes = {n for e in edges for n in e}
    incoming = Counter(b for _, b in edges)
    ready = [n for n in nodes if not incoming[n]]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for a, b in edges:
            if a == n:
                incoming[b] -= 1
                if not incoming[b]:
                    ready.append(b)
    return seen != len(nodes)


class GraphMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.g = GraphDefinition()
        self.by_id: dict[int, Node] = {}
        self.id_of: dict[Node, int] = {}
        self.live: set[int] = set()
        self.leaked: set[int] = set()
        self.edges: set[tuple[int, int]] = set()
        self.next_id = 0

    def teardown(self) -> None:
        self.g.close()

    # --- helpers ------------------------------------------------------------------------

    @property
    def existing(self) -> list[int]:
        return sorted(self.live | self.leaked)

    def _register(self, node: Node) -> int:
        nid = self.next_id
        self.next_id += 1
        self.by_id[nid] = node
        self.id_of[node] = nid
        return nid

    def _run(self, plans: list[Plan], op: Callable[[], Any], expected: Outcome) -> Any:
        """Run ``op`` under the fault plans; check the exception against ``expected``."""
        result: Any = None
        raised: BaseException | None = None
        with record_calls() as log:
            try:
                if plans:
                    with _plans(plans):
                        result = op()
                else:
                    result = op()
            except (CUDAError, ValueError, TypeError, ResourceClosedError, KeyError) as exc:
                raised = exc
        if expected.error is None:
            assert raised is None, f"unexpected {raised!r}"
        else:
            assert isinstance(raised, expected.error), f"expected {expected.error.__name__}, got {raised!r}"
            if expected.driver_error:
                assert isinstance(raised, CUDAError)
                assert raised.code == FAULT_CODE, raised
                notes = [n for n in getattr(raised, "__notes__", []) if "cleanup also failed" in n]
                assert len(notes) == expected.notes, (notes, expected.notes)
            else:  # E3: refused before any mutating driver call
                assert not [c for c in log if c.name in MUTATING], log
        return result

    def _edge_steps(self, removes: list[tuple[int, int]], adds: list[tuple[int, int]], calls: Calls) -> Outcome:
        """Model of cuguard.graphs._edges.apply_edges."""
        if adds and _has_cycle((self.edges - set(removes)) | set(adds)):
            return Outcome(ValueError)  # refused before any edge changes (E3)
        done: list[tuple[bool, tuple[int, int]]] = []
        failed = False
        for e in removes:
            if not calls.ok(REMOVE_EDGE):
                failed = True
                break
            self.edges.discard(e)
            done.append((False, e))
        if not failed:
            for e in adds:
                if not calls.ok(ADD_EDGE):
                    failed = True
                    break
                self.edges.add(e)
                done.append((True, e))
        if not failed:
            return Outcome()
        notes = 0
        for added, e in reversed(done):
            if added:
                if calls.ok(REMOVE_EDGE):
                    self.edges.discard(e)
                else:
                    notes += 1
            elif calls.ok(ADD_EDGE):
                self.edges.add(e)
            else:
                notes += 1
        return Outcome(CUDAError, notes, driver_error=True)

    # --- rules --------------------------------------------------------------------------

    @initialize(n=st.integers(min_value=0, max_value=5))
    def seed(self, n: int) -> None:
        for _ in range(n):
            self.live.add(self._register(self.g.empty()))

    @rule(data=st.data(), plans=plans_st)
    def add_node(self, data: st.DataObject, plans: list[Plan]) -> None:
        deps = data.draw(st.lists(st.sampled_from(self.existing), unique=True, max_size=4)) if self.existing else []
        self._add_node(deps, plans)

    def _add_node(self, deps: list[int], plans: list[Plan]) -> None:
        dep_nodes = [self.by_id[d] for d in deps]
        if any(d in self.leaked for d in deps):
            self._run(plans, lambda: self.g.empty(*dep_nodes), Outcome(ResourceClosedError))
            return
        # One driver call creates the node with all its edges, or nothing (the driver checks the
        # dependencies first); no edge call and no rollback are involved.
        if not Calls(plans).ok(ADD_NODE):
            self._run(plans, lambda: self.g.empty(*dep_nodes), Outcome(CUDAError, 0, driver_error=True))
            return
        node = self._run(plans, lambda: self.g.empty(*dep_nodes), Outcome())
        nid = self._register(node)
        self.live.add(nid)
        self.edges |= {(d, nid) for d in deps}

    @rule(data=st.data(), plans=plans_st)
    def connect(self, data: st.DataObject, plans: list[Plan]) -> None:
        if not self.existing:
            return
        ids = st.sampled_from(self.existing)
        fresh = [(a, b) for a in sorted(self.live) for b in sorted(self.live) if a != b and (a, b) not in self.edges]
        anything = st.lists(st.tuples(ids, ids), max_size=4)
        valid = st.lists(st.sampled_from(fresh), unique=True, min_size=1, max_size=4) if fresh else anything
        pairs = data.draw(st.one_of(valid, valid, anything))
        self._connect(pairs, plans)

    def _connect(self, pairs: list[tuple[int, int]], plans: list[Plan]) -> None:
        edges = [(self.by_id[a], self.by_id[b]) for a, b in pairs]
        expected = self._validate_pairs(pairs)
        if expected is None and (any(a == b for a, b in pairs) or any(p in self.edges for p in pairs)):
            expected = Outcome(ValueError)
        if expected is None:
            expected = self._edge_steps([], list(pairs), Calls(plans))
        self._run(plans, lambda: self.g.connect(*edges), expected)

    @rule(data=st.data(), plans=plans_st)
    def disconnect(self, data: st.DataObject, plans: list[Plan]) -> None:
        if not self.existing:
            return
        choices = sorted(self.edges) + [(a, b) for a in self.existing for b in self.existing][:3]
        anything = st.lists(st.sampled_from(choices), max_size=4)
        live_edges = sorted(e for e in self.edges if not set(e) & self.leaked)
        valid = st.lists(st.sampled_from(live_edges), unique=True, min_size=1, max_size=4) if live_edges else anything
        pairs = data.draw(st.one_of(valid, valid, anything))
        self._disconnect(pairs, plans)

    def _disconnect(self, pairs: list[tuple[int, int]], plans: list[Plan]) -> None:
        edges = [(self.by_id[a], self.by_id[b]) for a, b in pairs]
        expected = self._validate_pairs(pairs)
        if expected is None and any(p not in self.edges for p in pairs):
            expected = Outcome(ValueError)
        if expected is None:
            expected = self._edge_steps(list(pairs), [], Calls(plans))
        self._run(plans, lambda: self.g.disconnect(*edges), expected)

    def _validate_pairs(self, pairs: list[tuple[int, int]]) -> Outcome | None:
        seen: set[tuple[int, int]] = set()
        for a, b in pairs:
            if a in self.leaked or b in self.leaked:
                return Outcome(ResourceClosedError)
            if (a, b) in seen:
                return Outcome(ValueError)
            seen.add((a, b))
        return None

    def _view_items(self, node_id: int, items: list[int]) -> Outcome | None:
        """Model of EdgeView._valid followed by the view's own liveness check."""
        for i in items:
            if i in self.leaked:
                return Outcome(ResourceClosedError)
            if i == node_id:
                return Outcome(ValueError)
        if node_id in self.leaked:
            return Outcome(ResourceClosedError)
        return None

    def _side(self, node_id: int, incoming: bool) -> set[int]:
        if incoming:
            return {a for a, b in self.edges if b == node_id}
        return {b for a, b in self.edges if a == node_id}

    def _edge(self, node_id: int, other: int, incoming: bool) -> tuple[int, int]:
        return (other, node_id) if incoming else (node_id, other)

    @rule(data=st.data(), kind=st.sampled_from(["connect", "disconnect"]))
    def failing_rollback(self, data: st.DataObject, kind: str) -> None:
        """A forward step fails and then an undo step fails too (G4 notes, documented leftovers)."""
        live = sorted(self.live)
        if kind == "connect":
            fresh = [(a, b) for a in live for b in live if a != b and (a, b) not in self.edges]
            if len(fresh) < 2:
                return
            pairs = data.draw(st.lists(st.sampled_from(fresh), unique=True, min_size=2, max_size=4))
            j = data.draw(st.integers(2, len(pairs)))
            self._connect(pairs, [(ADD_EDGE, j), (REMOVE_EDGE, data.draw(st.integers(1, j - 1)))])
        elif kind == "disconnect":
            edges = sorted(e for e in self.edges if not set(e) & self.leaked)
            if len(edges) < 2:
                return
            pairs = data.draw(st.lists(st.sampled_from(edges), unique=True, min_size=2, max_size=4))
            j = data.draw(st.integers(2, len(pairs)))
            self._disconnect(pairs, [(REMOVE_EDGE, j), (ADD_EDGE, data.draw(st.integers(1, j - 1)))])

    @rule(data=st.data(), plans=plans_st, incoming=st.booleans(), how=st.sampled_from(["ior", "update", "add"]))
    def view_add(self, data: st.DataObject, plans: list[Plan], incoming: bool, how: str) -> None:
        if not self.existing:
            return
        nid = data.draw(st.sampled_from(self.existing))
        items = data.draw(st.lists(st.sampled_from(self.existing), max_size=1 if how == "add" else 4))
        node, others = self.by_id[nid], [self.by_id[i] for i in items]
        expected = Outcome() if how == "add" and not items else self._view_items(nid, items)
        if expected is None:
            current = self._side(nid, incoming)
            adds = [self._edge(nid, o, incoming) for o in sorted(set(items)) if o not in current]
            expected = self._edge_steps([], adds, Calls(plans))

        def op() -> None:
            view = node.pred if incoming else node.succ
            if how == "ior":
                view |= others
            elif how == "update":
                view.update(others)
            else:
                for o in others:
                    view.add(o)

        self._run(plans, op, expected)

    @rule(data=st.data(), plans=plans_st, incoming=st.booleans(), how=st.sampled_from(["isub", "discard", "clear"]))
    def view_remove(self, data: st.DataObject, plans: list[Plan], incoming: bool, how: str) -> None:
        if not self.existing:
            return
        nid = data.draw(st.sampled_from(self.existing))
        items = (
            []
            if how == "clear"
            else data.draw(st.lists(st.sampled_from(self.existing), max_size=1 if how == "discard" else 4))
        )
        node, others = self.by_id[nid], [self.by_id[i] for i in items]
        expected = Outcome() if how == "discard" and not items else self._view_items(nid, items)
        if expected is None:
            current = self._side(nid, incoming)
            gone = current if how == "clear" else current & set(items)
            if how == "clear" and gone & self.leaked:
                expected = Outcome(ResourceClosedError)
            else:
                removes = [self._edge(nid, o, incoming) for o in sorted(gone)]
                expected = self._edge_steps(removes, [], Calls(plans))

        def op() -> None:
            view = node.pred if incoming else node.succ
            if how == "isub":
                view -= others
            elif how == "discard":
                for o in others:
                    view.discard(o)
            else:
                view.clear()

        self._run(plans, op, expected)

    @rule(data=st.data(), plans=plans_st, incoming=st.booleans())
    def replace(self, data: st.DataObject, plans: list[Plan], incoming: bool) -> None:
        if not self.existing:
            return
        nid = data.draw(st.sampled_from(self.existing))
        items = data.draw(st.lists(st.sampled_from(self.existing), max_size=4))
        node, others = self.by_id[nid], [self.by_id[i] for i in items]
        expected = self._view_items(nid, items)
        if expected is None:
            current = self._side(nid, incoming)
            wanted = set(items)
            if (current - wanted) & self.leaked:
                expected = Outcome(ResourceClosedError)
            else:
                removes = [self._edge(nid, o, incoming) for o in sorted(current - wanted)]
                adds = [self._edge(nid, o, incoming) for o in sorted(wanted - current)]
                expected = self._edge_steps(removes, adds, Calls(plans))

        def op() -> None:
            if incoming:
                node.pred = others
            else:
                node.succ = others

        self._run(plans, op, expected)

    @rule(data=st.data(), plans=plans_st)
    def destroy(self, data: st.DataObject, plans: list[Plan]) -> None:
        if not self.existing:
            return
        nid = data.draw(st.sampled_from(self.existing))
        node = self.by_id[nid]
        if nid in self.leaked:
            self._run(plans, node.destroy, Outcome())  # idempotent: nothing happens
            return
        if Calls(plans).ok(DESTROY_NODE):
            self._run(plans, node.destroy, Outcome())
            self.live.discard(nid)
            self.edges = {e for e in self.edges if nid not in e}
        else:
            self._run(plans, node.destroy, Outcome(CUDAError, 0, driver_error=True))
            self.live.discard(nid)
            self.leaked.add(nid)

    @rule()
    def clone(self) -> None:
        copy = self.g.clone()
        try:
            twins = {nid: copy.find_node(self.by_id[nid]) for nid in self.live}
            back = {twin: nid for nid, twin in twins.items()}
            assert len(copy.nodes) == len(self.live) + len(self.leaked)
            assert set(twins.values()) <= copy.nodes
            copied = copy.edges
            assert len(copied) == len(self.edges)
            live_edges = {(back[a], back[b]) for a, b in copied if a in back and b in back}
            assert live_edges == {e for e in self.edges if e[0] in self.live and e[1] in self.live}
        finally:
            copy.close()

    @invariant()
    def same_graph(self) -> None:
        nodes = self.g.nodes
        assert {self.id_of[n] for n in nodes} == self.live | self.leaked
        assert {(self.id_of[a], self.id_of[b]) for a, b in self.g.edges} == self.edges
        for nid in self.leaked:
            assert self.by_id[nid].closed


class _plans:
    def __init__(self, plans: list[Plan]) -> None:
        self.plans = plans
        self.managers: list[Any] = []

    def __enter__(self) -> None:
        for fn, nth in self.plans:
            manager = inject(fn, FAULT_CODE, nth=nth)
            manager.__enter__()
            self.managers.append(manager)

    def __exit__(self, *exc: object) -> None:
        for manager in reversed(self.managers):
            manager.__exit__(None, None, None)


@pytest.mark.contract("B4", "G3", "G4", "E3")
def test_random_mutations_match_the_model(sim: Any) -> None:
    run_state_machine_as_test(
        GraphMachine,
        settings=settings(
            max_examples=500,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    assert not sim.misuse, sim.misuse
    assert not sim.double_release, sim.double_release
    assert not sim.use_after_release, sim.use_after_release
