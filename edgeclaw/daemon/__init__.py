"""The daemon: wires channels, agent, tools and backends from config; lifecycle; sd_notify."""
