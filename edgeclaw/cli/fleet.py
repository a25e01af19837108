"""`edgeclaw fleet serve`: the fleet page."""

from __future__ import annotations

import argparse

from edgeclaw.cli.common import EXIT_OK, config_of


def cmd_fleet(args: argparse.Namespace) -> int:
    import asyncio

    from edgeclaw.errors import ConfigError, ConfigErrors
    from edgeclaw.fleetpage.service import serve

    try:
        asyncio.run(
            serve(config_of(args), broker=args.broker, listen=args.listen, share_group=args.share_group)
        )
    except ConfigError as e:  # a listen address, a hash or a secret the server cannot use: refused (2)
        raise ConfigErrors([e]) from None
    return EXIT_OK
