"""Tools of MCP servers, bridged into the registry as `mcp_{server}_{tool}` (see `setup.py`)."""
