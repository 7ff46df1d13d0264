"""What a JSON-RPC line must be before anything decodes it recursively.

Every line on every surface (a client's stdio and HTTP, an upstream's stdio and HTTP) is checked
as bytes before msgspec builds anything from it:

- **nesting** at most `MAX_DEPTH` arrays and objects deep, counted outside strings. msgspec and
  the proxy's own code recurse, the Python MCP SDK drops a message nested about 195 deep without
  answering it, and serde_json (the Rust SDK's parser) stops at 128;
- **UTF-8** throughout (RFC 8259 §8.1);
- and, for a line of up to `FULL_CHECK_BYTES`, **every value decodable**: numbers that fit a
  64-bit float, integers of at most `MAX_INTEGER_CHARS` characters (Python's own limit on
  converting text to int, which msgspec applies and json.loads shares), strings without raw
  control characters or lone surrogates. A longer line (a large result, mostly) is checked for
  nesting and UTF-8 only: the values pass through as they came, and a value the proxy itself
  decodes later gets the same messages from `jsonrpc.decode_any`.

Each check is linear and runs at C speed: counting, `bytes.translate` and `bytes.replace` for the
nesting (a Python loop over a large line would cost more than the decode it protects), and
msgspec's own full decode for the values, which `checked` hands back so that the envelope
(`jsonrpc`, `id`, `method`) is read from it instead of being decoded again. Sans-IO.
"""

from __future__ import annotations

import array
import codecs
import re
from itertools import accumulate
from typing import Any, Final

import msgspec

MAX_DEPTH: Final = 128
MAX_INTEGER_CHARS: Final = 4300
FULL_CHECK_BYTES: Final = 1024 * 1024

DEPTH_MESSAGE: Final = f"nested more than {MAX_DEPTH} levels deep in arrays and objects (the limit is {MAX_DEPTH})"
FLOAT_MESSAGE: Final = "a number is out of range: JSON numbers must fit a 64-bit float (at most about 1.8e308)"
INTEGER_MESSAGE: Final = f"an integer is out of range: integers are limited to {MAX_INTEGER_CHARS} characters"

_ALL_BYTES: Final = bytes(range(256))
_NOT_OPENERS: Final = _ALL_BYTES.translate(None, b"[{")
_NOT_STRUCTURE: Final = _ALL_BYTES.translate(None, b'"[]{}')
_STEPS: Final = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as signed bytes
_BRACKETED_STRING: Final = re.compile(rb'"[^"]*"')
_UTF8_PIECE: Final = 256 * 1024
_validator = msgspec.json.Decoder()


class LineRefused(ValueError):
    """A line that breaks a limit; `parse` says whether it is not JSON at all (-32700) rather
    than JSON the proxy refuses to carry (-32600)."""

    def __init__(self, message: str, *, parse: bool = False) -> None:
        super().__init__(message)
        self.parse = parse


def check(line: bytes | bytearray) -> None:
    """Raise LineRefused unless the line keeps every limit above."""
    checked(line)


# What `checked` returns for a line too long to be decoded whole: its values were not read.
UNREAD: Final = object()


def checked(line: bytes | bytearray) -> Any:
    """The line's JSON value, fully decoded by the check itself (so that a caller need not decode
    what it reads of it again), or `UNREAD` for a line over `FULL_CHECK_BYTES`, which is checked
    for nesting and UTF-8 only. Raises LineRefused unless the line keeps every limit above."""
    if too_deep(line):
        raise LineRefused(DEPTH_MESSAGE)
    if len(line) > FULL_CHECK_BYTES:
        _check_utf8(line)
        return UNREAD
    try:
        return _validator.decode(line)
    except msgspec.ValidationError as exc:
        raise LineRefused(value_message(exc)) from None
    except msgspec.DecodeError as exc:
        raise LineRefused(f"not valid JSON: {exc}", parse=True) from None


def value_message(exc: msgspec.ValidationError) -> str:
    """What a msgspec range error means, naming the limit."""
    text = str(exc)
    if text.startswith("Integer value out of range"):
        return INTEGER_MESSAGE
    if text.startswith("Number out of range"):
        return FLOAT_MESSAGE
    return f"a value cannot be decoded: {text}"


def too_deep(line: bytes | bytearray, limit: int = MAX_DEPTH) -> bool:
    """Whether arrays and objects nest deeper than `limit` outside strings."""
    if len(line.translate(None, _NOT_OPENERS)) <= limit:
        return False  # not even that many brackets open: the common case, at the cost of one pass
    text = line
    if b"\\" in text:  # drop escaped backslashes, then escaped quotes: every quote left delimits
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    skeleton = text.translate(None, _NOT_STRUCTURE)
    # Quotes alternate open and close, so dropping two adjacent ones keeps that true: what goes
    # is an empty string or the seam between two strings. Left are the few strings holding brackets.
    skeleton = skeleton.replace(b'""', b"")
    if b'"' in skeleton:
        skeleton = _BRACKETED_STRING.sub(b"", skeleton)
    if len(skeleton.translate(None, _NOT_OPENERS)) <= limit:
        return False
    return max(accumulate(array.array("b", skeleton.translate(_STEPS))), default=0) > limit


def _check_utf8(line: bytes | bytearray) -> None:
    """Valid UTF-8, decoded a piece at a time so that no str of a large line exists whole."""
    if line.isascii():
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(line)
    try:
        for start in range(0, len(view), _UTF8_PIECE):
            decoder.decode(view[start : start + _UTF8_PIECE])
        decoder.decode(b"", True)
    except UnicodeDecodeError:
        raise LineRefused("not valid JSON: invalid UTF-8", parse=True) from None
