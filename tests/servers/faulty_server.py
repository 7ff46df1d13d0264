"""A session-era MCP server over stdio that misbehaves on request, for the proxy's bad-input tests.

Written against raw JSON-RPC (no SDK) so that it can do what a well-behaved SDK server never
would: write garbage to stdout, answer ids nobody sent, send oversized lines, die mid-call.

`emit {lines, reply}` writes each of `lines` (base64, `{ID}` standing for the call's own id) to
stdout as it is, then answers the call with `reply` (no answer when it is null): a hostile
upstream for the bad-input and fuzz tests. `cancellations` answers with the request ids of the
`notifications/cancelled` it has received (each is also noted on stderr), `noisy {lines}`
writes that many lines of garbage before its answer. With FAULTY_IGNORE_DISCOVER set it never
answers `server/discover` (nor says it does not know it).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time

TOOLS = ["echo", "garbage", "stray_reply", "huge", "die", "ask", "pid", "slow", "emit", "cancellations", "noisy"]
_write_lock = threading.Lock()
_cancelled: list[object] = []
_waiting: dict[int, dict] = {}
_next_id = [1000]


def send(message: object) -> None:
    with _write_lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def raw(line: str) -> None:
    with _write_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def raw_bytes(lines: list[bytes]) -> None:
    with _write_lock:
        for line in lines:
            sys.stdout.buffer.write(line + b"\n")
        sys.stdout.buffer.flush()


def text_result(request_id: object, text: str, is_error: bool = False) -> None:
    send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {"content": [{"type": "text", "text": text}], "isError": is_error},
        }
    )


def ask_client(request_id: object) -> None:
    """Ask the client to sample, wait for the answer in a thread, then answer the call."""
    ident = _next_id[0] = _next_id[0] + 1
    event = threading.Event()
    _waiting[ident] = {"event": event}
    params = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5}
    send({"jsonrpc": "2.0", "id": ident, "method": "sampling/createMessage", "params": params})
    event.wait(30)
    reply = _waiting.pop(ident).get("reply", {})
    if "error" in reply:
        text_result(request_id, f"sampling failed: {reply['error'].get('message')}", is_error=True)
    else:
        text_result(request_id, "client said: " + reply.get("result", {}).get("content", {}).get("text", "?"))


def call(request_id: object, name: str, arguments: dict) -> None:
    if name == "echo":
        text_result(request_id, str(arguments.get("text", "")))
    elif name == "garbage":
        raw("this line is not JSON at all")
        text_result(request_id, "after garbage")
    elif name == "stray_reply":
        send({"jsonrpc": "2.0", "id": 987654, "result": {}})
        text_result(request_id, "after stray reply")
    elif name == "huge":
        text_result(request_id, "x" * int(arguments.get("size", 10_000)))
    elif name == "die":
        sys.stderr.write("faulty: dying on purpose\n")
        sys.stderr.flush()
        os._exit(7)
    elif name == "ask":
        threading.Thread(target=ask_client, args=(request_id,), daemon=True).start()
    elif name == "emit":
        ident = json.dumps(request_id).encode()
        raw_bytes([base64.b64decode(line).replace(b"{ID}", ident) for line in arguments.get("lines", [])])
        if arguments.get("reply", "emitted") is not None:
            text_result(request_id, str(arguments.get("reply", "emitted")))
    elif name == "cancellations":
        text_result(request_id, json.dumps(_cancelled))
    elif name == "noisy":
        raw_bytes([b"noise %d: not JSON-RPC" % number for number in range(int(arguments.get("lines", 3)))])
        text_result(request_id, "after noise")
    elif name == "pid":
        text_result(request_id, str(os.getpid()))
    elif name == "slow":
        threading.Thread(
            target=lambda: (
                time.sleep(float(arguments.get("seconds", 1))),
                text_result(request_id, "slow done"),
            ),
            daemon=True,
        ).start()
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": f"unknown tool {name}"}})


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        try:
            handle(message)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:  # odd params: say so, stay up
            if isinstance(message, dict) and "method" in message and message.get("id") is not None:
                error = {"code": -32602, "message": f"bad params: {type(exc).__name__}"}
                send({"jsonrpc": "2.0", "id": message["id"], "error": error})
    # FAULTY_SLOW_EXIT=S: at the end of stdin, close stdout at once but take S seconds to exit,
    # as a server that saves its state on the way out does.
    linger = float(os.environ.get("FAULTY_SLOW_EXIT", "0"))
    if linger:
        sys.stdout.close()
        os.close(1)
        time.sleep(linger)


def handle(message: dict) -> None:
    method = message.get("method")
    request_id = message.get("id")
    if method is None:
        waiting = _waiting.get(request_id)
        if waiting is not None:
            waiting["reply"] = message
            waiting["event"].set()
        return
    if request_id is None:
        if method == "notifications/cancelled":
            _cancelled.append((message.get("params") or {}).get("requestId"))
            sys.stderr.write(f"faulty: cancelled {_cancelled[-1]}\n")
            sys.stderr.flush()
        return
    if method == "initialize":
        result = {
            "protocolVersion": message["params"].get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "faulty", "version": "1"},
        }
        send({"jsonrpc": "2.0", "id": request_id, "result": result})
    elif method == "tools/list":
        tools = [{"name": n, "inputSchema": {"type": "object"}} for n in TOOLS]
        send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
    elif method == "tools/call":
        call(request_id, message["params"]["name"], message["params"].get("arguments") or {})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": request_id, "result": {}})
    elif method == "server/discover" and os.environ.get("FAULTY_IGNORE_DISCOVER"):
        return  # a session-era server that never answers a method it does not know
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
