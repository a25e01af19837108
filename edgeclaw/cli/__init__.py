"""The `edgeclaw` command line: `main` (the entry), `parser` (the argparse tree) and one module per
command family, each importing only what its command needs.

Nothing is re-exported here: importing a submodule runs this file first, and a re-export would
load every command (and hide who imports whom) for each of them.
"""
