"""The nodes group: `nodes` (`tool`), the peers on the broker and calls to their tools."""
