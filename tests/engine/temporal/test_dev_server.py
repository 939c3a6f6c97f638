"""The test suite's Temporal dev server survives a port taken from under it."""

from __future__ import annotations

import socket

from tests.engine.temporal.server import TemporalDevServer


def test_a_taken_port_makes_the_server_start_again_on_a_fresh_one() -> None:
    server = TemporalDevServer()
    taken = server.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        try:
            address = server.start()
            assert address != f"127.0.0.1:{taken}"
            with socket.create_connection(("127.0.0.1", server.port), timeout=5):
                pass
        finally:
            server.stop()
