"""edgeclaw: an LLM agent daemon for embedded Linux boards.

Kept import-free on purpose: `edgeclaw --version` and every CLI start pay for
whatever this module pulls in.
"""

__version__ = "0.1.0"
