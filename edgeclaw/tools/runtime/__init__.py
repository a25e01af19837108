"""The runtime group: `exec`, background `process`es and custom tools, with their shell machinery.

`shell` is what the three share (the runner, the gate, approvals); `shell_setup` builds them from the
config and is the one module that imports them all. `shell_syntax`, `command_text`, `command_roles`
(with `program_specs`), `denylist`, `exec_policy` and `custom_template` read command text and decide
what may run.
"""
