"""The ``agentledger`` command line: run the demo, inspect, follow, check and repair a store.

One module per command group (``sessions``, ``runs``, ``records``, ``tail``,
``transcript``, ``check``, ``repair``, ``demo``, ``worker``), registered in
:data:`agentledger.cli.app.COMMANDS`; ``--db`` is an :class:`agentledger.target.Target`
(shared with ``serve`` and ``worker``), opened by :func:`agentledger.cli.target.open_store`.
Built on click: per-command ``--help`` and shell
completion.
"""

from agentledger.cli.app import main

__all__ = ["main"]
