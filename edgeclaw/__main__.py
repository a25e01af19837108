"""The `edgeclaw` command's entry point (the console script and `python -m edgeclaw`).

What needs no parser is answered before one is loaded: `edgeclaw --version`
prints from here, so it costs the interpreter's start and nothing more
(argparse alone takes as long as starting Python). Everything else goes to
`edgeclaw.cli.main`.
"""

import sys


def main() -> int:
    if sys.argv[1:] == ["--version"]:
        from edgeclaw import __version__

        print(f"edgeclaw {__version__}")  # what argparse's version action prints
        return 0
    from edgeclaw.cli.main import main as cli_main

    return cli_main()


if __name__ == "__main__":
    raise SystemExit(main())
