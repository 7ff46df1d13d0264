"""Client config documents: JSON at the file's own indent, TOML with comments kept, bad files refused."""

from __future__ import annotations

import pytest

from frugal_proxy.install.documents import JsonDocument, Malformed, ordered, parse


@pytest.mark.parametrize("indent", ["  ", "    ", "\t"])
def test_json_keeps_the_files_indent_key_order_and_final_newline(indent: str) -> None:
    text = "{\n" + indent + '"z": 1,\n' + indent + '"servers": {}\n}'
    document = parse(text, "json", "servers")
    document.set("frugal", {"command": "f"})
    inner = indent * 2
    assert document.dumps() == (
        "{\n" + indent + '"z": 1,\n' + indent + '"servers": {\n' + inner + '"frugal": {\n'
        f'{inner}{indent}"command": "f"\n{inner}}}\n{indent}}}\n}}'
    )


def test_json_new_or_empty_file_gets_the_servers_key() -> None:
    for text in (None, "", "  \n"):
        document = parse(text, "json", "mcpServers")
        assert document.names() == []
        document.set("frugal", {"command": "f", "args": ["serve"]})
        assert document.dumps() == '{\n  "mcpServers": {\n    "frugal": {\n      "command": "f",\n' + (
            '      "args": [\n        "serve"\n      ]\n    }\n  }\n}\n'
        )


@pytest.mark.parametrize(
    ("fmt", "text", "message"),
    [
        ("json", '{"a": 1,}', "not valid JSON: Expecting property name enclosed in double quotes: line 1 column 9"),
        ("json", "[]", "the top level is not a JSON object"),
        ("json", '{"mcpServers": "x"}', '"mcpServers" is not an object'),
        ("toml", "a = = 1", "not valid TOML: "),
        ("toml", 'mcpServers = "x"', "[mcpServers] is not a table"),
    ],
)
def test_malformed_files_are_refused_with_the_reason(fmt: str, text: str, message: str) -> None:
    with pytest.raises(Malformed) as caught:
        parse(text, fmt, "mcpServers")
    assert str(caught.value).startswith(message)


def test_toml_edits_in_place_and_removal_gives_the_text_back() -> None:
    text = '# top\n[mcp_servers.a]\ncommand = "x"  # why\nargs = ["1"]\n\n[other]\nk = 1\n'
    document = parse(text, "toml", "mcp_servers")
    document.set("a", {"command": "f", "args": ["--", "x", "1"]})
    document.set("frugal", {"command": "f", "args": ["serve"]})
    changed = document.dumps()
    assert changed == (
        '# top\n[mcp_servers.a]\ncommand = "f"  # why\nargs = ["--", "x", "1"]\n\n'
        '[mcp_servers.frugal]\ncommand = "f"\nargs = ["serve"]\n\n[other]\nk = 1\n'
    )
    again = parse(changed, "toml", "mcp_servers")
    again.remove("frugal")
    again.set("a", {"command": "x", "args": ["1"]})
    assert again.dumps() == text
    assert again.get("a") == {"command": "x", "args": ["1"]}


def test_toml_new_file() -> None:
    document = parse(None, "toml", "mcp_servers")
    document.set("frugal", {"url": "http://p/mcp"})
    assert document.dumps() == '[mcp_servers.frugal]\nurl = "http://p/mcp"\n'


def test_ordered_compares_key_order() -> None:
    assert ordered({"a": 1, "b": [{"c": 2}]}) == ordered({"a": 1, "b": [{"c": 2}]})
    assert ordered({"a": 1, "b": 2}) != ordered({"b": 2, "a": 1})


def test_json_servers_table_at_a_path_is_created_and_found() -> None:
    text = '{"projects": {"/a": {"allowedTools": []}}}'
    document = parse(text, "json", ("projects", "/b", "mcpServers"))
    assert document.names() == []
    document.set("frugal", {"command": "f"})
    assert document.plain() == {
        "projects": {"/a": {"allowedTools": []}, "/b": {"mcpServers": {"frugal": {"command": "f"}}}}
    }
    again = parse(document.dumps(), "json", ("projects", "/b", "mcpServers"))
    assert again.get("frugal") == {"command": "f"}
    again.remove("frugal")
    assert again.names() == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"projects": []}', '"projects" is not an object'),
        ('{"projects": {"/b": {"mcpServers": 1}}}', '["projects"]["/b"]["mcpServers"] is not an object'),
    ],
)
def test_json_a_path_through_something_else_is_refused(text: str, message: str) -> None:
    with pytest.raises(Malformed, match=message.replace("[", r"\[")):
        parse(text, "json", ("projects", "/b", "mcpServers"))


def test_json_inputs_are_added_once_and_removed_exactly() -> None:
    item = {"type": "promptString", "id": "frugal-token", "password": True}
    document = JsonDocument('{"servers": {}}', ("servers",))
    assert document.add_input(item)
    assert not document.add_input({**item, "description": "another"})
    assert document.plain() == {"servers": {}, "inputs": [item]}
    assert not document.remove_input({**item, "password": False})
    assert document.remove_input(item)
    assert document.plain() == {"servers": {}}
    with pytest.raises(Malformed, match='"inputs" is not a list'):
        JsonDocument('{"inputs": {}}', ("servers",)).add_input(item)
