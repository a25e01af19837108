"""Configuration: the TOML schema, where the file is found, and how it is checked."""

from edgeclaw.config.loader import find_config_path, load_config
from edgeclaw.config.schema import Config

__all__ = ["Config", "find_config_path", "load_config"]
