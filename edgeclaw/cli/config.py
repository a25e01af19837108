"""`edgeclaw config check|show|init`."""

from __future__ import annotations

import argparse
import sys

from edgeclaw.cli.common import EXIT_OK, EXIT_REFUSED, EXIT_TOOL_ERROR, config_of, warn_missing_secrets


def cmd_config(args: argparse.Namespace) -> int:
    if args.config_command == "show":
        return cmd_config_show(args)
    if args.config_command == "init":
        return cmd_config_init(args)
    return cmd_config_check(args)


def cmd_config_show(args: argparse.Namespace) -> int:
    import dataclasses

    from edgeclaw import board as boards
    from edgeclaw.config.paths import device_id, state_dir
    from edgeclaw.config.render import render_effective
    from edgeclaw.tools.scrub import Scrubber

    config = config_of(args)
    if args.board:
        config = dataclasses.replace(config, board=args.board)
    state = state_dir(config.state_dir)
    profile = boards.resolve(config.board, "--board" if args.board else config._source)
    header = [
        f"effective configuration from {config._source}",
        f"device id: {device_id(config.device_id)}",
        f"board: {config.board}" + (f" -> {profile.name}" if profile.name != config.board else ""),
        f"state directory: {state}",
        f"workspace: {config.workspace or state / 'workspace'}",
        "secrets are never inline: only the names of their variables and files are shown",
    ]
    text = render_effective(config, header)
    # Belt and braces: anything shaped like a credential (a URL with a password, a token someone
    # pasted into a description) is redacted like tool output.
    print(Scrubber().scrub(text), end="")
    return EXIT_OK


def cmd_config_init(args: argparse.Namespace) -> int:
    from edgeclaw.config.render import render_sample

    text = render_sample()
    if not args.file:
        print(text, end="")
        return EXIT_OK
    try:
        with open(args.file, "x", encoding="utf-8") as f:  # "x": never overwrite a config
            f.write(text)
    except FileExistsError:
        print(f"edgeclaw: {args.file} exists; not overwriting it", file=sys.stderr)
        return EXIT_REFUSED
    except OSError as e:
        print(f"edgeclaw: cannot write {args.file}: {e.strerror}", file=sys.stderr)
        return EXIT_REFUSED
    print(f"wrote {args.file}", file=sys.stderr)
    return EXIT_OK


def cmd_config_check(args: argparse.Namespace) -> int:
    from edgeclaw.config.loader import find_config_path, load_config
    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.errors import ConfigErrors

    path = find_config_path(args.file)
    try:
        config = load_config(args.file)
        build_runtime(config, require_secrets=False)
    except ConfigErrors as e:
        print(e, file=sys.stderr)
        return EXIT_TOOL_ERROR  # the check ran and found problems: not a refusal
    warn_missing_secrets(config)
    print(f"{path or 'built-in defaults'}: ok")
    return EXIT_OK
