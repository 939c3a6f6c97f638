"""``python -m agentledger`` runs the command-line interface."""

from agentledger.cli import main

raise SystemExit(main())
