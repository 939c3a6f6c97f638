"""The per-run invariants both SQL backends' checkers test, over counts their SQL gathers."""

from __future__ import annotations

__all__ = ["run_problems"]

_TERMINAL = ("completed", "failed", "canceled")


def run_problems(
    run_id: str,
    status: str,
    last_seq: int,
    session_id: str,
    parent_run_id: str,
    count: int,
    first: int,
    newest: int,
    started_first: int,
    started: int,
    completed: int,
    suspended: int,
    has_checkpoint: int,
    has_session: int,
    has_parent: int,
) -> list[str]:
    """Every way one run's row and record counts break the invariants, as messages."""
    problems: list[str] = []
    say = problems.append
    terminal = status in _TERMINAL
    if terminal and completed != 1:
        say(f"run {run_id!r}: {status} with {completed} run_completed records (want 1)")
    if not terminal and completed:
        say(f"run {run_id!r}: {status} but has {completed} run_completed records")
    if status == "suspended" and not (has_checkpoint and suspended == 1):
        say(
            f"run {run_id!r}: suspended with checkpoint={bool(has_checkpoint)} "
            f"and {suspended} run_suspended records (want a checkpoint and 1)"
        )
    if status != "suspended" and (has_checkpoint or suspended):
        say(f"run {run_id!r}: {status} but holds a checkpoint or a run_suspended record")
    if started != 1 or not started_first:
        say(f"run {run_id!r}: want one run_started record at id 1 with its started_key")
    if not (count == last_seq == newest and first == (1 if count else 0)):
        say(
            f"run {run_id!r}: ids not 1..last_seq without gaps "
            f"(last_seq={last_seq}, count={count}, min={first}, max={newest})"
        )
    if session_id and not has_session:
        say(f"run {run_id!r}: its session {session_id!r} is missing")
    if parent_run_id and not has_parent:
        say(f"run {run_id!r}: its parent {parent_run_id!r} is missing")
    return problems
