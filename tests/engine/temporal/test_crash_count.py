"""How a worker counts an activity's starts without finishing, from heartbeat details.

Pure logic (:class:`~agentledger.engine.temporal.worker._Starts`): the real
worker deaths are in ``test_crash_loop.py``; these pin every case of the
count, which the real runs only meet some of.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentledger.engine.temporal.worker import _Starts


def _beat(attempt: int, lost: int, transient: int = 0, ended: bool = False) -> list[Any]:
    return [{"attempt": attempt, "lost": lost, "transient": transient, "ended": ended}]


@pytest.mark.parametrize(
    ("attempt", "details", "lost", "transient"),
    [
        (1, [], 0, 0),  # the first start: nothing lost
        (2, [], 1, 0),  # attempt 1 died before its first heartbeat got through
        (4, [], 3, 0),  # three attempts died, none heartbeating
        (2, _beat(1, 0), 1, 0),  # attempt 1 heartbeated, then died
        (2, _beat(1, 0, 1, ended=True), 0, 1),  # attempt 1 ended with a TransientError
        (4, _beat(3, 2), 3, 0),  # died, died, died
        (4, _beat(3, 1, 1, ended=True), 1, 1),  # 1 or 2 died, then 3 ended transient
        (5, _beat(2, 1), 4, 0),  # 2 died after its beat, 3 and 4 before theirs
        (5, _beat(3, 0, 3, ended=True), 1, 3),  # three transient errors, then one death
        (3, [{"something": "else"}], 2, 0),  # details not ours: every earlier attempt lost
        (2, _beat(2, 0), 1, 0),  # details from this very attempt number: not trusted
    ],
)
def test_lost_attempts_are_counted_from_the_last_heartbeat(
    attempt: int, details: list[Any], lost: int, transient: int
) -> None:
    """Attempts before the last heartbeat's count as it says; the one that sent it is lost
    unless it ended; every attempt after it that never heartbeated is lost."""
    starts = _Starts.at_start(attempt, details)
    assert (starts.attempt, starts.lost, starts.transient) == (attempt, lost, transient)
    assert starts.ended is False


def test_the_count_round_trips_through_heartbeat_details() -> None:
    """What an attempt heartbeats is what the next one reads."""
    starts = _Starts(attempt=3, lost=2, transient=0)
    assert _Starts.at_start(4, [starts.details()]).lost == 3
