"""Power loss, reduced: each scenario recorded once, a few cuts in both modes [issue 45].

The full run is ``python -m tests.durability.power_loss --cuts 500``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.durability.power_loss import run_scenario

CUTS = 5
COUNTS = {"sqlite-full": 25, "sqlite-normal": 25, "sweep": 4, "keys": 6, "tokens": 6}


@pytest.mark.parametrize("scenario", sorted(COUNTS))
def test_no_cut_loses_an_acknowledged_write(scenario: str, recorder: Path, tmp_path: Path) -> None:
    outcomes = run_scenario(
        scenario, ["synced", "subset"], CUTS, 7, tmp_path, recorder, count=COUNTS[scenario]
    )
    for outcome in outcomes:
        assert outcome.cuts == CUTS
        assert outcome.checked > 0, outcome.line()
        assert outcome.violations == [], outcome.line()
