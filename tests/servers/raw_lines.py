"""The loop of the raw JSON-RPC stdio test servers (cache_hint_server.py, meta_server.py): each
request line on stdin answered on stdout by `answer(request)`'s result, a LookupError as -32601
(method not found); notifications and replies get nothing back."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable


def serve(answer: Callable[[dict], dict]) -> None:
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request or "method" not in request:
            continue
        try:
            reply = {"jsonrpc": "2.0", "id": request["id"], "result": answer(request)}
        except LookupError as exc:
            reply = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": f"no {exc}"}}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
