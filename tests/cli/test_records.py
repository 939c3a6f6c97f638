"""`records --type T --limit N --cursor C --full`: filter, page and show whole records."""

from __future__ import annotations

import json

from tests.cli.conftest import Demo, run_cli


def _all(demo: Demo, run_id: str) -> list[dict[str, object]]:
    records: list[dict[str, object]] = run_cli(
        "--db", str(demo.db), "--json", "records", run_id
    ).json()["records"]
    return records


def test_type_filter(demo: Demo) -> None:
    run_id = demo.runs[0]["run_id"]
    every = _all(demo, run_id)
    data = run_cli(
        "--db", str(demo.db), "--json", "records", run_id,
        "--type", "run_phase_changed", "--type", "run_completed",
    ).json()  # fmt: skip
    assert [r["id"] for r in data["records"]] == [
        r["id"] for r in every if r["type"] in ("run_phase_changed", "run_completed")
    ]
    assert data["next_cursor"] == ""


def test_limit_and_cursor_page_through_everything_once(demo: Demo) -> None:
    """[L9] pages of 4 with the printed cursor give every record once, in order."""
    run_id = demo.runs[-1]["run_id"]
    every = _all(demo, run_id)
    seen: list[object] = []
    cursor = ""
    while True:
        page = run_cli(
            "--db", str(demo.db), "--json", "records", run_id, "--limit", "4", "--cursor", cursor
        ).json()
        assert len(page["records"]) <= 4
        seen.extend(r["id"] for r in page["records"])
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == [r["id"] for r in every]


def test_filtered_pages_resume_right_after_the_last_record_shown(demo: Demo) -> None:
    """A filtered page that stops mid-page still resumes exactly after its last record."""
    run_id = demo.runs[-1]["run_id"]
    wanted = [r["id"] for r in _all(demo, run_id) if r["type"] == "run_phase_changed"]
    assert len(wanted) >= 3
    seen: list[object] = []
    cursor = ""
    while True:
        page = run_cli(
            "--db", str(demo.db), "--json", "records", run_id,
            "--type", "run_phase_changed", "--limit", "2", "--cursor", cursor,
        ).json()  # fmt: skip
        seen.extend(r["id"] for r in page["records"])
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == wanted


def test_text_paging_says_how_to_go_on(demo: Demo) -> None:
    run_id = demo.runs[-1]["run_id"]
    done = run_cli("--db", str(demo.db), "records", run_id, "--limit", "3")
    assert done.code == 0
    assert len(done.out.splitlines()) == 4  # header and three records
    assert done.err.startswith("more: add --cursor ")
    cursor = done.err.split()[-1]
    rest = run_cli("--db", str(demo.db), "records", run_id, "--cursor", cursor)
    assert rest.out.splitlines()[1].split()[0] == "4"


def test_full_shows_whole_payloads(demo: Demo) -> None:
    """The table previews payloads; --full prints each one whole, as pretty JSON."""
    run_id = demo.runs[1]["run_id"]  # the research turn: a long child-run answer
    every = _all(demo, run_id)
    longest = max(every, key=lambda r: len(json.dumps(r["payload"])))
    assert len(json.dumps(longest["payload"])) > 200
    table = run_cli("--db", str(demo.db), "records", run_id)
    assert "…" in table.out
    full = run_cli("--db", str(demo.db), "records", run_id, "--full")
    assert full.code == 0
    blocks = full.out.split("── ")[1:]
    assert len(blocks) == len(every)
    block = blocks[every.index(longest)]
    header, _, body = block.partition("\n")
    assert header.startswith(f"{longest['id']}  {longest['type']}  ")
    assert json.loads(body) == longest["payload"]


def test_a_bad_cursor_is_refused(demo: Demo) -> None:
    done = run_cli("--db", str(demo.db), "records", demo.runs[0]["run_id"], "--cursor", "bogus")
    assert done.code == 1
    assert "cursor" in done.err
