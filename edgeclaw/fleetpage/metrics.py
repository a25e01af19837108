"""The fleet page's Prometheus metrics (`GET /metrics`, with a session or the page's bearer token, like
its API): the fleet as the page sees it and what was asked of it through the page.

Read from the page's window when Prometheus scrapes (devices by state and by trust, approvals waiting,
the broker link), plus counters of the commands sent from the page and their outcomes, of broadcast
answers, and of the messages the page handed to the kept history (in a share group: its share of them),
kept here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from edgeclaw.net.prometheus_text import CONTENT_TYPE, Family, render

__all__ = ["CONTENT_TYPE", "PageMetrics"]


TRUST = ("verified", "forged", "key_changed", "unverifiable")


class PageMetrics:
    def __init__(self) -> None:
        self.commands: Counter[tuple[str, str]] = Counter()  # (kind, outcome)
        self.broadcast_answers = 0
        self.broadcast_missing = 0
        self.history: Counter[str] = Counter()  # messages handed to the history store, by its table

    def handed(self, table: str) -> None:
        self.history[table] += 1

    def command(self, kind: str, outcome: str) -> None:
        """One call, chat or approval from the page: `ok`, `refused` or `timeout`."""
        self.commands[(kind, outcome)] += 1

    def broadcast(self, answers: int, missing: int) -> None:
        self.commands[("broadcast", "ok")] += 1
        self.broadcast_answers += answers
        self.broadcast_missing += missing

    def exposition(self, snapshot: dict[str, Any]) -> bytes:
        """The text Prometheus reads, from the page's snapshot (`FleetPage.snapshot`)."""
        by_state: Counter[str] = Counter(row.get("state", "unknown") for row in snapshot["devices"])
        by_trust: Counter[str] = Counter(row.get("trust", "unverifiable") for row in snapshot["devices"])
        devices = Family("edgeclaw_page_devices", "gauge", "Devices the page holds, by their state.")
        for state in ("online", "offline", "unknown"):
            devices.sample(by_state[state], state=state)
        trust = Family("edgeclaw_page_devices_by_trust", "gauge", "Devices by the trust in what they sign.")
        for verdict in TRUST:
            trust.sample(by_trust[verdict], trust=verdict)
        approvals = Family(
            "edgeclaw_page_approvals_waiting", "gauge", "Approval questions waiting, by trust."
        )
        waiting: Counter[str] = Counter(a.get("trust", "unverifiable") for a in snapshot["approvals"])
        for verdict in TRUST:
            approvals.sample(waiting[verdict], trust=verdict)
        commands = Family(
            "edgeclaw_page_commands_total", "counter", "Commands sent from the page, by kind and outcome."
        )
        for (kind, outcome), count in sorted(self.commands.items()):
            commands.sample(count, kind=kind, outcome=outcome)
        answers = Family(
            "edgeclaw_page_broadcast_answers_total",
            "counter",
            "Broadcast answers, and devices that gave none.",
        )
        answers.sample(self.broadcast_answers, outcome="answered")
        answers.sample(self.broadcast_missing, outcome="missing")
        history = Family(
            "edgeclaw_page_history_handed_total",
            "counter",
            "Messages this page handed to the kept history, by table (a share group's page: its share).",
        )
        for table in ("health", "events", "answers", "approvals"):
            history.sample(self.history[table], table=table)
        broker = Family("edgeclaw_page_broker_connected", "gauge", "1 while the page's broker link is up.")
        broker.sample(1 if snapshot.get("broker") else 0)
        return render([devices, trust, approvals, commands, answers, history, broker])
