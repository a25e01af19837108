"""`edgeclaw board detect|show`: the board profiles."""

from __future__ import annotations

import argparse
import sys

from edgeclaw.cli.common import EXIT_OK, EXIT_REFUSED, EXIT_TOOL_ERROR


def cmd_board(args: argparse.Namespace) -> int:
    from edgeclaw import board
    from edgeclaw.errors import ConfigErrors

    try:
        if args.board_command == "detect":
            found = board.detect()
            if found is None:
                print(f"no profile matches this machine (the daemon would use {board.FALLBACK_BOARD!r})")
                return EXIT_TOOL_ERROR
            print(found.name)
            return EXIT_OK
        profile = board.load_profile(args.name, "board show")
    except ConfigErrors as e:
        print(e, file=sys.stderr)
        return EXIT_REFUSED
    print(f"{profile.name}: {profile.description}")
    print(f"soc: {profile.soc or 'unknown'}{' (simulated)' if profile.simulated else ''}")
    print(f"file: {profile.path}")
    if profile.models or profile.compatible:
        print(f"detected by: {', '.join(repr(m) for m in (*profile.models, *profile.compatible))}")
    print("grants (anything not listed is refused; writes only where a line says so):")
    for line in board.describe_grants(profile):
        print(f"  {line}")
    return EXIT_OK
