"""The child side of `pattern_match`'s `re` engine: run by path with `python -I -S`, standard library only.

Reads one JSON request a line on stdin and answers each with one JSON line on stdout:
  {"op": "compile", "pattern": P, "flags": F}              -> {"key": N} (keys count up from 0)
  {"op": "select", "key": N, "full": B, "subjects": [...]}  -> {"hits": [indexes of matching subjects]}
A pattern that does not compile answers {"error": reason}. The parent kills this process when a
match runs past its deadline, which is the point: `re` cannot be interrupted any other way.
"""

from __future__ import annotations

import json
import re
import sys


def main() -> None:
    compiled: list[re.Pattern[str]] = []
    out = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "compile":
            try:
                compiled.append(re.compile(request["pattern"], request["flags"]))
            except (re.error, OverflowError, RecursionError) as exc:
                reply: dict[str, object] = {"error": str(exc)}
            else:
                reply = {"key": len(compiled) - 1}
        else:
            pattern = compiled[request["key"]]
            method = pattern.fullmatch if request["full"] else pattern.search
            reply = {"hits": [i for i, s in enumerate(request["subjects"]) if method(s) is not None]}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
