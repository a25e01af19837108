"""The web tools (group `web`): web_fetch, web_search, http_request; built by `setup.web_tools`."""
