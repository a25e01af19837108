"""Configuration: the TOML schema, where the file is found, and how it is checked."""
