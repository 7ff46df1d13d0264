"""Reading large JSON results with as few passes and copies as the governor's questions allow.

Scanning a large tools/call result once with msgspec costs about two thirds of hashing it once
with sha256, so every extra pass shows in the governor's latency, and every whole-payload `str` in its
memory (a string with one character beyond Latin-1 takes two or four bytes per character).
A result reaches the governor already read by msgspec once (the frame decode, or the encode of
frugal__shape_result's envelope), which checked its syntax and escapes; so the readers that
find a value by its bytes alone (read_string_result, text_block) need not scan it again, and a
string without `\\u` escapes can be unescaped byte for byte. Sans-IO and pure.

    read_result     a result's top-level fields and content blocks, in one pass
    read_split      the same for an SDK structured result, its arrays split in that pass
    read_string_result  the same for an SDK string result, found from its length, unscanned
    text_block      a `{"type":"text","text":…}` block's fields, without a second scan
    string_result_block  the same for the block read_string_result gave, without a second walk
    object_fields   an object's fields, its arrays split into raw items in the same pass
    first_value     the first byte of an object's first value, read from its start
    string_payload  the UTF-8 bytes and character count of a JSON string, unescaped in one C pass
                    (or piecewise by msgspec where that pass cannot read its escapes)
"""

from __future__ import annotations

import codecs
import io
import re
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

raws = msgspec.json.Decoder(list[msgspec.Raw])
objects = msgspec.json.Decoder(dict[str, msgspec.Raw])
_strings = msgspec.json.Decoder(str)
# An object whose arrays come out as lists of raw items in the same pass; a number outside 64
# bits makes it fail, and object_fields falls back to raw values.
_Field = list[msgspec.Raw] | dict[str, msgspec.Raw] | str | int | float | bool | None
_fields = msgspec.json.Decoder(dict[str, _Field])

SNIFF_BYTES = 512
_TEXT_BLOCK = b'{"type":"text","text":"'
_TEXT = msgspec.Raw(b'"text"')
_TEXT_BLOCK_QUOTES = 64
_WALK_BYTES = 1 << 16
_STRING_HEAD = b'{"content":[' + _TEXT_BLOCK
_STRING_KEY = b'{"result":"'
_STRING_MIDDLE = b'"}],"structuredContent":' + _STRING_KEY
_STRING_ENDS = (b'"}}', b'"},"isError":false}', b'"},"isError":true}')
_FIRST_VALUE = re.compile(rb'\s*\{\s*"(?:[^"\\]|\\.)*"\s*:\s*(\S)')
FIRST_KEY = re.compile(rb'\s*\{\s*"((?:[^"\\]|\\.)*)"\s*:\s*')
_BACKSLASH = re.compile(rb"\\")
# What the two-byte JSON escapes other than \n stand for.
_ESCAPED_NOT_NEWLINE = (b'"', b"\\", b"\t", b"\r", b"\b", b"\f")
# The JSON escapes that escape_decode reads otherwise (`\u`) or not at all (`\/`); an escaped
# backslash followed by `u` or `/` matches too, and only sends its piece down the slower path.
_UNICODE_ESCAPE = re.compile(rb"\\[u/]")
# A JSON string is decoded a piece at a time beyond this size, so that its `str` never exists
# whole; a piece ends where no escape sequence (at most 12 bytes: a surrogate pair) spans it.
PIECE_BYTES = 1 << 16
_ESCAPE_SPAN = 12
_SPLIT_SEARCH = 4096


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    """The fields the spec gives a tools/call result; a result with any other field is read
    field by field instead, so that nothing is lost."""

    content: list[msgspec.Raw] | UnsetType = UNSET
    structuredContent: msgspec.Raw | UnsetType = UNSET
    isError: msgspec.Raw | UnsetType = UNSET
    resultType: msgspec.Raw | UnsetType = UNSET
    meta: msgspec.Raw | UnsetType = msgspec.field(default=UNSET, name="_meta")


_envelope = msgspec.json.Decoder(_Envelope)
_ENVELOPE_NAMES = tuple(field.encode_name for field in msgspec.structs.fields(_Envelope))


class _SplitEnvelope(msgspec.Struct, forbid_unknown_fields=True):
    """An SDK result whose structuredContent ends in an array: its arrays come out as raw items
    in the same pass as the content blocks."""

    content: list[msgspec.Raw] | UnsetType = UNSET
    structuredContent: dict[str, _Field] | UnsetType = UNSET
    isError: msgspec.Raw | UnsetType = UNSET


_split_envelope = msgspec.json.Decoder(_SplitEnvelope)
_encoder = msgspec.json.Encoder()
_SPLIT_HEAD = b'{"content":['
_SPLIT_KEY = b',"structuredContent":'
_SPLIT_ENDS = (b"]}}", b']},"isError":false}', b']},"isError":true}')


def read_split(
    result: bytes | msgspec.Raw,
) -> tuple[dict[str, msgspec.Raw], list[msgspec.Raw], dict[str, Any], bytes] | None:
    """`read_result` of an SDK result `{"content":[…],"structuredContent":{…,"k":[…]}[,"isError":…]}`
    in one pass, with structuredContent's fields (its arrays as raw items) and its bytes
    beside. Those bytes are the fields encoded again, checked byte for byte against the end
    of the result. None for any other result."""
    view = memoryview(result)
    tail = bytes(view[-len(_SPLIT_ENDS[1]) - 1 :])
    if bytes(view[: len(_SPLIT_HEAD)]) != _SPLIT_HEAD or not tail.endswith(_SPLIT_ENDS):
        return None
    try:
        envelope = _split_envelope.decode(result)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    blocks, fields = envelope.content, envelope.structuredContent
    if isinstance(blocks, UnsetType) or isinstance(fields, UnsetType):
        return None
    encoded = _encoder.encode(fields)
    end = len(view) - (1 if tail.endswith(b"]}}") else len(tail) - tail.index(b',"isError"'))
    start = end - len(encoded)
    # The encoding matches the bytes before the end only where they are structuredContent's
    # own: a JSON value cannot hold a copy of itself deeper inside.
    if start <= len(_SPLIT_HEAD) or bytes(view[start - len(_SPLIT_KEY) : start]) != _SPLIT_KEY:
        return None
    structured = msgspec.Raw(view[start:end])
    if structured != msgspec.Raw(encoded):
        return None
    body = {"structuredContent": msgspec.Raw(encoded)}  # the same bytes, its own: the spill keeps them
    del structured  # (and no view of the whole result is held)
    if not isinstance(envelope.isError, UnsetType):
        body["isError"] = envelope.isError
    body["content"] = msgspec.Raw(b"[]")
    return body, blocks, fields, encoded


def first(raw: msgspec.Raw | bytes) -> bytes:
    """The first significant byte of a raw JSON value, without copying the value."""
    return bytes(memoryview(raw)[:64]).lstrip()[:1]


def read_result(result: bytes | msgspec.Raw) -> tuple[dict[str, msgspec.Raw], list[msgspec.Raw]]:
    """A result's top-level fields (`content` among them when present, its value to be rebuilt)
    and its content blocks, raw. Raises msgspec errors when it is not a JSON object."""
    try:
        envelope = _envelope.decode(result)
    except msgspec.ValidationError:
        body = objects.decode(result)
        content = body.get("content")
        return body, raws.decode(content) if content is not None and first(content) == b"[" else []
    values = msgspec.structs.astuple(envelope)
    body = {name: value for name, value in zip(_ENVELOPE_NAMES, values, strict=True) if value is not UNSET}
    blocks = body.pop("content", None)
    if blocks is None:
        return body, []
    body["content"] = msgspec.Raw(b"[]")
    return body, blocks  # type: ignore[return-value]


def text_block(raw: msgspec.Raw) -> dict[str, msgspec.Raw] | None:
    """A content block that is exactly `{"type":"text","text":"…"}` as its two fields, read from
    its ends rather than scanned again: the text's quotes are few, each escaped (a JSON text
    inside it, full of quotes, is left to a full decode: None, as for any other block)."""
    view = memoryview(raw)
    start = len(_TEXT_BLOCK)
    if len(view) > SNIFF_BYTES and bytes(view[:start]) == _TEXT_BLOCK and bytes(view[-2:]) == b'"}':
        if _one_string_body(view[start:-2]):
            return {"type": _TEXT, "text": msgspec.Raw(view[start - 1 : -1])}
    return None


def read_string_result(result: bytes | msgspec.Raw) -> tuple[dict[str, msgspec.Raw], list[msgspec.Raw]] | None:
    """`read_result` of the SDK's string result, `{"content":[{"type":"text","text":"T"}],
    "structuredContent":{"result":"T"}[,"isError":…]}`, without scanning it: the two copies of
    T are found from the result's length, compared byte for byte, and walked for a quote that
    would end T early. None for any other result (or a T with many quotes: JSON text)."""
    view = memoryview(result)
    tail = bytes(view[-len(_STRING_ENDS[1]) :])
    end = next((len(view) - len(ending) for ending in _STRING_ENDS if tail.endswith(ending)), None)
    if end is None or len(view) < 2 * SNIFF_BYTES or bytes(view[: len(_STRING_HEAD)]) != _STRING_HEAD:
        return None
    size, odd = divmod(end - len(_STRING_HEAD) - len(_STRING_MIDDLE), 2)
    first = len(_STRING_HEAD)
    second = first + size + len(_STRING_MIDDLE)
    if odd or bytes(view[first + size : second]) != _STRING_MIDDLE:
        return None
    text, copy = msgspec.Raw(view[first - 1 : first + size + 1]), msgspec.Raw(view[second - 1 : end + 1])
    if text != copy or not _one_string_body(view[first : first + size]):
        return None
    # the JSON of the other fields is read as ever; the texts are left for string_payload
    body = {"structuredContent": msgspec.Raw(view[second - len(_STRING_KEY) : end + 2])}
    if end + 2 < len(view) - 1:
        body["isError"] = msgspec.Raw(view[end + 2 + len(b',"isError":') : -1])
    body["content"] = msgspec.Raw(b"[]")
    return body, [msgspec.Raw(view[1 + len(b'"content":[') : first + size + 2])]


def string_result_block(block: msgspec.Raw) -> dict[str, msgspec.Raw]:
    """The fields of the text block `read_string_result` gave, read from its ends: that read
    checked the block is exactly `{"type":"text","text":…}` and walked its text already."""
    return {"type": _TEXT, "text": msgspec.Raw(memoryview(block)[len(_TEXT_BLOCK) - 1 : -1])}


def _one_string_body(view: memoryview) -> bool:
    """Whether the bytes between two quotes hold no quote that is not escaped, found within
    `_TEXT_BLOCK_QUOTES` looks (prose and logs have few quotes; a JSON text has many). Read in
    pieces, so that no copy of a large text is made."""
    looks = 0
    for low in range(0, len(view), _WALK_BYTES):
        piece = bytes(view[low : low + _WALK_BYTES])
        quote = piece.find(b'"')
        while quote >= 0:
            looks += 1
            if looks > _TEXT_BLOCK_QUOTES:
                return False
            start = low + quote
            while start > 0 and view[start - 1] == 0x5C:  # the backslashes before it
                start -= 1
            if (low + quote - start) % 2 == 0:  # not escaped: the string ends before the block does
                return False
            quote = piece.find(b'"', quote + 1)
    return True


def first_value(raw: bytes | msgspec.Raw) -> bytes:
    """The first byte of a JSON object's first value (b"" when there is none)."""
    head = _FIRST_VALUE.match(memoryview(raw)[:SNIFF_BYTES])
    return head.group(1) if head else b""


def object_fields(raw: bytes | msgspec.Raw, as_raw: Callable[[], dict[str, msgspec.Raw]] | None) -> dict[str, Any]:
    """An object's fields. Unless its first value is a string, it likely carries an array, and
    one pass gives every array as a list of raw items (other values decoded); otherwise every
    value stays raw (`as_raw`, when given, supplies them), so that a long string is skipped
    rather than decoded."""
    if first_value(raw) != b'"':
        try:
            return _fields.decode(raw)
        except msgspec.ValidationError:
            pass
    return as_raw() if as_raw is not None else objects.decode(raw)


def string_payload(raw: msgspec.Raw | bytes, piece_bytes: int = PIECE_BYTES) -> tuple[bytes, int]:
    """The UTF-8 bytes of a raw JSON string and its length in characters (raises
    msgspec.DecodeError on invalid UTF-8). A string without escapes is copied once; one with
    escapes is unescaped byte for byte by escape_decode into one buffer where that reads them
    as JSON does, else decoded by msgspec a piece at a time into one buffer: no `str` of a
    large string exists whole. Pieces of `piece_bytes` (64 KiB) stay in the processor's cache
    and in memory the allocator reuses; a `str` of a whole MiB and its encoding would be fresh
    pages beside the payload."""
    payload, chars, _ = string_read(raw, piece_bytes)
    return payload, chars


def string_read(raw: msgspec.Raw | bytes, piece_bytes: int = PIECE_BYTES) -> tuple[bytes, int, int | None]:
    """`string_payload`, and how many escapes it held when each was one of two bytes (None
    when some were not, `\\uXXXX`): see `newlines`."""
    view = memoryview(raw)
    body = view[1:-1]
    payload = bytes(body) if _BACKSLASH.search(body) is None else _escape_decoded(body)
    if payload is not None:
        if payload.isascii():
            return payload, len(payload), len(body) - len(payload)
        chars = _utf8_chars(payload, piece_bytes)
        if chars is not None:
            return payload, chars, len(body) - len(payload)
        del payload  # invalid UTF-8: msgspec says what is wrong with it, below
    return *_pieces(view, piece_bytes, _unescape), None


def newlines(payload: bytes, escapes: int | None) -> int | None:
    """The newlines in a string that `string_read` gave with its count of two-byte escapes,
    where they need no counting: a JSON string holds a newline, `"`, `\\`, tab, CR, backspace
    or form feed only escaped (the frame's reader checked), so when it holds none of the six
    others (looked for with memchr, much faster than counting) its escapes are its newlines.
    None where they must be counted."""
    if escapes is None:
        return None
    if escapes and any(byte in payload for byte in _ESCAPED_NOT_NEWLINE):
        return None
    return escapes


def _escape_decoded(body: memoryview) -> bytes | None:
    """A JSON string's body with its escapes read by escape_decode (one C pass, one buffer), or
    None where that would not be what JSON means. escape_decode reads \\" \\\\ \\b \\f \\n
    \\r \\t as JSON does (msgspec has checked there are no escapes but those, \\/ and \\u),
    and leaves \\u and \\/ as they were, with a DeprecationWarning (ignored by Python's default
    filters; an exception where warnings are errors): so a backslash followed by `u` or `/` in
    what it gives back (one it left, or an escaped backslash before such a letter) sends the
    string to the general path. No pass over the whole string looks for those escapes first:
    that search costs as much as the unescaping."""
    try:
        payload: bytes = codecs.escape_decode(body)[0]
    except (DeprecationWarning, ValueError):
        return None
    first = payload.find(b"\\")
    if first >= 0 and _UNICODE_ESCAPE.search(payload, first) is not None:
        return None
    return payload


def _decoded(text: str) -> tuple[bytes, int]:
    return text.encode("utf-8", "surrogatepass"), len(text)


def _utf8_chars(payload: bytes, piece_bytes: int) -> int | None:
    """Characters in UTF-8 bytes, counted a piece at a time; None when they are not UTF-8 (a
    hostile upstream's bytes: msgspec does not check them inside a value it skips as Raw)."""
    view = memoryview(payload)
    decoder = codecs.getincrementaldecoder("utf-8")()  # holds a character split between pieces
    piece = max(4, piece_bytes)
    chars = 0
    try:
        for start in range(0, len(view), piece):
            chars += len(decoder.decode(view[start : start + piece], final=start + piece >= len(view)))
    except UnicodeDecodeError:
        return None
    return chars


def _pieces(
    view: memoryview, piece_bytes: int, unescape: Callable[[memoryview], tuple[bytes, int]]
) -> tuple[bytes, int]:
    """A raw JSON string decoded a piece at a time into one buffer of its size (unescaping never
    lengthens it): each piece ends where no escape sequence and no UTF-8 character spans it (or,
    with escapes everywhere, the whole is decoded at once)."""
    out = io.BytesIO()
    if len(view) > 2:  # sized once: no copy as it grows, and getvalue() hands the buffer over
        out.seek(len(view) - 3)
        out.write(b"\0")
        out.seek(0)
    chars = 0
    start, end_of_body = 1, len(view) - 1
    while start < end_of_body:
        end = min(end_of_body, start + piece_bytes)
        if end < end_of_body:
            split = _split_point(view, start, end)
            if split is None:  # escapes everywhere: decode the whole string at once
                return _decoded(_strings.decode(view))
            end = split
        piece, count = unescape(view[start:end])
        chars += count
        out.write(piece)
        start = end
    out.truncate(out.tell())
    return out.getvalue(), chars


def _unescape(body: memoryview) -> tuple[bytes, int]:
    """One piece of a JSON string's body (no escape sequence or character split at its ends) as
    UTF-8 bytes, and its length in characters (raises msgspec.DecodeError on invalid UTF-8)."""
    piece = bytes(body)
    if not piece.isascii() and _UNICODE_ESCAPE.search(piece) is None:
        # Beyond ASCII a `str` costs two or four bytes a character to build and as much to encode
        # again; the escapes left (\" \\ \b \f \n \r \t: msgspec has checked there are no
        # others) mean the same to escape_decode, which works byte for byte.
        payload = codecs.escape_decode(piece)[0] if b"\\" in piece else piece
        try:
            return payload, len(payload.decode("utf-8"))
        except UnicodeDecodeError:
            pass  # msgspec says what is wrong with it
    del piece
    quoted = bytearray(b'"')
    quoted += body
    quoted += b'"'
    text = _strings.decode(quoted)
    return text.encode("utf-8", "surrogatepass"), len(text)


def _split_point(view: memoryview, start: int, end: int) -> int | None:
    """An offset in (start, end] that no escape sequence and no UTF-8 character spans: the
    `_ESCAPE_SPAN` bytes before it hold no backslash and it starts a character."""
    low = max(start, end - _SPLIT_SEARCH)
    region = bytes(view[low : end + 1])
    q = end - low
    while q >= _ESCAPE_SPAN:
        back = region.rfind(b"\\", q - _ESCAPE_SPAN, q)
        if back >= 0:
            q = back
        elif region[q] & 0xC0 == 0x80:
            q -= 1
        else:
            return low + q
    return None
