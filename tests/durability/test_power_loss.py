"""Power loss, reduced: each scenario recorded once, a few cuts in both modes [issue 45].

The full run is ``python -m tests.durability.power_loss --cuts 500``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.durability.image import Mode
from tests.durability.power_loss import run_scenario

CUTS = 5
COUNTS = {"sweep": 4, "keys": 6, "tokens": 6, "sealed": 10}


@pytest.mark.parametrize("scenario", sorted(COUNTS))
def test_no_cut_loses_an_acknowledged_write(scenario: str, recorder: Path, tmp_path: Path) -> None:
    outcomes = run_scenario(
        scenario, ["synced", "subset"], CUTS, 7, tmp_path, recorder, count=COUNTS[scenario]
    )
    for outcome in outcomes:
        assert outcome.cuts == CUTS
        assert outcome.checked > 0, outcome.line()
        assert outcome.violations == [], outcome.line()


def test_normal_may_lose_the_last_commits_and_full_does_not(recorder: Path, tmp_path: Path) -> None:
    """What a SIGKILL cannot show: at ``normal`` a power loss takes back acknowledged
    appends (never more than the last ones: a prefix stays); at ``full`` none."""
    modes: list[Mode] = ["synced", "subset"]
    full = run_scenario("sqlite-full", modes, CUTS, 7, tmp_path, recorder, count=25)
    normal = run_scenario("sqlite-normal", modes, CUTS, 7, tmp_path, recorder, count=25)
    for outcome in full + normal:
        assert outcome.cuts == CUTS
        assert outcome.checked > 0, outcome.line()
        assert outcome.violations == [], outcome.line()
    assert [o.allowed for o in full] == [0, 0]
    assert normal[0].allowed > 0, normal[0].line()  # synced mode: all unsynced commits gone


def test_postgres_keeps_every_acknowledged_append(recorder: Path, tmp_path: Path) -> None:
    """initdb, the server (fsync=on) and one writer under the recorder; a cut mid-run and
    one at the end, each recovered by a real server (names made durable by a file's
    fsync, as on ext4: PostgreSQL's own assumption)."""
    outcomes = run_scenario("postgres", ["synced"], 2, 7, tmp_path, recorder, count=12, writers=2)
    assert outcomes[0].cuts == 2
    assert outcomes[0].checked > 0, outcomes[0].line()
    assert outcomes[0].violations == [], outcomes[0].line()
