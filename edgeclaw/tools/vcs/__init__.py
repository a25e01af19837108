"""Version control of the workspace: the `git` tool (group `vcs`)."""
