"""`edgeclaw console hash-pin`: a hash for the serial console's login."""

from __future__ import annotations

import argparse
import sys

from edgeclaw.cli.common import EXIT_OK, EXIT_REFUSED


def cmd_console_hash_pin(args: argparse.Namespace) -> int:
    import getpass

    from edgeclaw.config.pin_hash import hash_pin

    if args.stdin or not sys.stdin.isatty():
        pin = sys.stdin.readline().rstrip("\r\n")
    else:
        pin = getpass.getpass("PIN or password: ")
        if getpass.getpass("again: ") != pin:
            print("edgeclaw: the two entries differ", file=sys.stderr)
            return EXIT_REFUSED
    try:
        print(hash_pin(pin, args.algorithm))
    except ValueError as e:
        print(f"edgeclaw: {e}", file=sys.stderr)
        return EXIT_REFUSED
    print(
        'put it in the config: [console] login_hash = "..." (or in a file named by login_hash_file)',
        file=sys.stderr,
    )
    return EXIT_OK
