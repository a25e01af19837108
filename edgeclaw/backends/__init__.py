"""Backends: the code that touches hardware (and, later, sandboxes and stores), below the tools.

Each hardware backend is a small protocol with a real driver and a simulated
one; `hub.BoardBackends` takes them from one driver factory (`drivers.RealDrivers`
or `sim.drivers.SimDrivers`), chosen from the board profile. Backends raise
`BackendError` with plain-words messages (and the OS error number as `errno`)
and never import a tool.
"""
