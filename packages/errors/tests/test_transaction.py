"""Transaction: the undo steps of a multi-step operation run newest first when it fails (G1), and a failed
undo is a note on the propagating exception, never a replacement for it (G4)."""

from __future__ import annotations

import pytest

from cuguard.errors import CUDAError, Transaction

OUT_OF_MEMORY = 2
NOT_PERMITTED = 800


def _failing(code: int, call: str) -> None:
    raise CUDAError(code, call)


@pytest.mark.contract("G1")
def test_a_failed_step_undoes_the_earlier_ones_newest_first() -> None:
    undone: list[str] = []

    def operation() -> None:
        with Transaction() as undo:
            undo.append(undone.append, "reserve")
            undo.append(undone.append, "create")
            _failing(OUT_OF_MEMORY, "cuMemMap")

    with pytest.raises(CUDAError) as caught:
        operation()
    assert undone == ["create", "reserve"]
    assert caught.value.call == "cuMemMap"


@pytest.mark.contract("G1")
def test_a_committed_transaction_undoes_nothing() -> None:
    undone: list[str] = []
    with Transaction() as undo:
        undo.append(undone.append, "reserve")
        assert undo.pending == 1
        undo.commit()
        assert undo.pending == 0
    assert undone == []


@pytest.mark.contract("G4")
def test_a_failed_undo_is_a_note_and_the_other_undos_still_run() -> None:
    undone: list[str] = []

    def operation() -> None:
        with Transaction() as undo:
            undo.append(undone.append, "reserve")
            undo.append(_failing, NOT_PERMITTED, "cuMemRelease")
            _failing(OUT_OF_MEMORY, "cuMemMap")

    with pytest.raises(CUDAError) as caught:
        operation()
    assert caught.value.call == "cuMemMap"  # the operation's own failure, not the undo's
    assert undone == ["reserve"]
    notes = "\n".join(caught.value.__notes__)
    assert "cuMemRelease" in notes
    assert "CUDA_ERROR_NOT_PERMITTED" in notes


@pytest.mark.contract("G4")
def test_leaving_without_commit_undoes_and_raises_the_first_undo_failure() -> None:
    undone: list[str] = []

    def operation() -> None:
        with Transaction() as undo:  # the block ends without commit(): its undo steps run
            undo.append(undone.append, "reserve")
            undo.append(_failing, NOT_PERMITTED, "cuMemRelease")
            undo.append(_failing, OUT_OF_MEMORY, "cuMemUnmap")

    with pytest.raises(CUDAError) as caught:
        operation()
    assert undone == ["reserve"]
    assert caught.value.call == "cuMemUnmap"  # newest first: the first failure
    assert "cuMemRelease" in "\n".join(caught.value.__notes__)


@pytest.mark.contract("G1")
def test_rollback_outside_a_block_runs_each_step_once() -> None:
    undone: list[str] = []
    undo = Transaction()
    undo.append(undone.append, "a")
    error = RuntimeError("step failed")
    undo.rollback(error)
    undo.rollback(error)
    assert undone == ["a"]
    assert repr(undo) == "<Transaction: 0 undo step(s) pending>"


@pytest.mark.contract("E3")
def test_an_undo_step_must_be_callable() -> None:
    undo = Transaction()
    with pytest.raises(TypeError, match="undo must be a callable"):
        undo.append("not callable")  # type: ignore[arg-type]
    assert undo.pending == 0


@pytest.mark.contract("O1")
def test_a_transaction_is_not_copied_its_steps_would_run_twice() -> None:
    import copy
    import pickle

    undo = Transaction()
    undo.append(print, "released")
    for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match="Transaction objects cannot be copied"):
            attempt(undo)
    undo.commit()
