"""Backends: the code that touches hardware (and, later, sandboxes and stores), below the tools.

Each hardware backend is a small protocol with a real driver and a simulated
one; `hub.BoardBackends` picks between them from the board profile. Backends
raise `BackendError` with plain-words messages and never import a tool.
"""
