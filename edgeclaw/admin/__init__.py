"""Operator actions on a running installation: updates, config apply with its trial and rollback,
restarting, reading the logs, reloading tools.

The daemon's gateway wiring hands them to the gateway tool and `edgeclaw run` settles their trials
at start; they import nothing of the daemon (the runtime they act on is passed in).
"""
