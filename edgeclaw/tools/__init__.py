"""The tool runtime: tools, their registry, policy, scrubbing and limits."""
