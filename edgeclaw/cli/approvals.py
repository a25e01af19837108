"""`edgeclaw approvals list|revoke`: the stored allow-always decisions."""

from __future__ import annotations

import argparse
import json
import sys

from edgeclaw.cli.common import EXIT_OK, EXIT_TOOL_ERROR, config_of


def cmd_approvals(args: argparse.Namespace) -> int:
    from edgeclaw.config.paths import state_dir
    from edgeclaw.store.approvals import ApprovalStore
    from edgeclaw.store.db import DB_FILENAME, Database

    state = state_dir(config_of(args).state_dir)
    # Listing must not create a state database where there is none.
    store = ApprovalStore(Database.in_state_dir(state)) if (state / DB_FILENAME).exists() else None
    if args.approvals_command == "revoke":
        if store is None or not store.revoke(args.id):
            print(f"edgeclaw: no stored approval with id {args.id}", file=sys.stderr)
            return EXIT_TOOL_ERROR
        print(f"revoked approval {args.id}")
        return EXIT_OK
    rows = store.list() if store is not None else []
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print("no stored approvals")
        return EXIT_OK
    import time

    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created_at))
        who = r.created_by or "?"
        print(f"{r.id:>4}  {r.tool:<10} agent={r.agent_id:<8} {when}  by {who}  uses={r.uses}")
        print(f"      {r.pattern}")
    return EXIT_OK
