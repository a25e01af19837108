"""Test doubles for your own tests, shipped with edgeclaw (as gpiozero ships MockFactory and httpx
MockTransport).

- `SimBoard`: the sim board's backends built from a board profile, with its device models at hand
  and the faults a real bus has to inject (a NACK, a timeout, a hung transfer, a flipped bit).
- `mock_client`: the HTTP client edgeclaw's providers, notifiers and media services share, with
  its requests answered by your function through `httpx.MockTransport` instead of the network.

See docs/testing.md. Nothing here touches hardware or the network; nothing in the daemon imports it.
"""

from __future__ import annotations

from edgeclaw.testing.http import mock_client
from edgeclaw.testing.sim_board import SimBoard

__all__ = ["SimBoard", "mock_client"]
