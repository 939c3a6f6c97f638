"""[S6] Fuzz the service from its own OpenAPI document with schemathesis.

Valid and invalid requests for every operation, with a host token (so the
store itself is reached): no answer is a 5xx, every refusal carries a typed
error body, and a refused request leaves the database exactly as it was (a
digest of every table of the served SQLite file, read beside the service).
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

from agentledger.service.error_codec import decode_error
from tests.service.process import ServiceProcess, Tokens

EXAMPLES = 6


def _digest(db: Path) -> str:
    """Every row of every table of the file, hashed (a virtual table's through its shadow
    tables: a contentless FTS5 table cannot be scanned)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        digest = hashlib.sha256()
        tables = (
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND sql NOT LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name"
        )
        names = [row[0] for row in conn.execute(tables)]
        for name in names:
            for row in conn.execute(f'SELECT * FROM "{name}" ORDER BY 1'):
                digest.update(repr(row).encode())
        return digest.hexdigest()
    finally:
        conn.close()


def test_fuzz_every_operation(sqlite_service: ServiceProcess, tokens: Tokens) -> None:
    """[S6] zero 5xx; refusals are typed and change nothing."""
    url = sqlite_service.url
    db = Path(sqlite_service.db)
    document = httpx.get(f"{url}/openapi.json").json()
    schema = schemathesis.openapi.from_dict(document)
    headers = {"authorization": f"Bearer {tokens.host}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 25
    seen: dict[int, int] = {}

    for operation in operations:
        spec = document["paths"][operation.path][operation.method.lower()]
        modes = [schemathesis.GenerationMode.POSITIVE]
        if "requestBody" in spec or "parameters" in spec:  # nothing to get wrong otherwise
            modes.append(schemathesis.GenerationMode.NEGATIVE)
        for mode in modes:

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case: schemathesis.Case) -> None:
                before = _digest(db)
                response = case.call(base_url=url, headers=headers, timeout=10)
                status = response.status_code
                seen[status] = seen.get(status, 0) + 1
                assert status < 500, (case.path, case.body, response.text)
                if status >= 400:
                    assert decode_error(response.content) is not None, response.text
                    assert _digest(db) == before, (case.path, case.body, response.text)

            check()
    assert seen.get(200, 0) > 0, seen
    assert sum(n for s, n in seen.items() if s >= 400) > 0, seen
