"""The client's frames of its WebSocket (:mod:`agentledger.service.socket_transport`)."""

from __future__ import annotations

import os

import pytest
from websockets.utils import apply_mask

from agentledger.service.socket_transport import _masked, _masked_here


@pytest.mark.parametrize("length", [0, 1, 3, 4, 5, 125, 126, 600, 65536, 70_001])
def test_both_masks_are_the_websockets_librarys(length: int) -> None:
    """A client's payload is masked as RFC 6455 says, with the C mask and without it."""
    data, mask = os.urandom(length), os.urandom(4)
    expected = apply_mask(data, mask)  # the websockets library's own, pure Python
    assert _masked(data, mask) == expected
    assert _masked_here(data, mask) == expected
