"""The fixture server for the official MCP conformance suite (`@modelcontextprotocol/conformance`).

The suite tests servers over HTTP only and calls fixtures by name (`test_simple_text`,
`test://static-text`, `test_simple_prompt`, the `test_input_required_result_*` tools, ...). This
server provides every fixture the suite's server scenarios name, for both eras: 2026-07-28
(stateless, `server/discover`, input-required results, `subscriptions/listen`) and the
session-era revisions (initialize, server-to-client sampling/elicitation, logging, progress,
resource subscriptions). It is built on the SDK's lowlevel `Server` so that every answer has the
exact wire shape the scenario asks for.

    python tests/servers/conformance_server.py                # stdio (what frugal-proxy wraps)
    python tests/servers/conformance_server.py --http         # Streamable HTTP at /mcp on
                                                              # 127.0.0.1, free port printed
                                                              # as `PORT <n>`
    python tests/servers/conformance_server.py --http --session-way
                                                              # the sampling and elicitation
                                                              # tools ask the session-era way
                                                              # in both eras, as the python-sdk
                                                              # everything server does
"""

from __future__ import annotations

import argparse
import base64
import json
import socket
import warnings
from collections.abc import Awaitable, Callable, Mapping
from itertools import count
from typing import Any, cast

import anyio
import uvicorn
from mcp import types
from mcp.server.caching import CACHEABLE_METHODS, CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, PromptsListChanged, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import JSONRPCMessage

# The logging, roots and progress capabilities are deprecated at 2026-07-28; the session-era
# scenarios still exercise them, so this server registers them knowingly.
warnings.filterwarnings("ignore", message=".*deprecated as of 2026-07-28.*")

NAME = "frugal-conformance-fixtures"
# A 1x1 PNG and a minimal WAV file (44-byte header, two bytes of samples).
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = base64.b64encode(
    b"RIFF" + (38).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
    + (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + (8000).to_bytes(4, "little")
    + (16000).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
    + b"data" + (2).to_bytes(4, "little") + b"\x00\x00"
).decode()  # fmt: skip
EMPTY = {"type": "object", "properties": {}}
NAME_FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

Ctx = ServerRequestContext[Any, Any]
SESSION_WAY = False  # --session-way: ask() always asks the session-era way
Result = dict[str, Any]


def text(value: str) -> Result:
    return {"content": [{"type": "text", "text": value}]}


def elicitation(message: str, schema: Mapping[str, Any]) -> Result:
    return {"method": "elicitation/create", "params": {"message": message, "requestedSchema": dict(schema)}}


def sampling(prompt: str, max_tokens: int) -> Result:
    message = {"role": "user", "content": {"type": "text", "text": prompt}}
    return {"method": "sampling/createMessage", "params": {"messages": [message], "maxTokens": max_tokens}}


def input_required(requests: Mapping[str, Result], state: str | None = None) -> Result:
    result: Result = {"resultType": "input_required", "inputRequests": dict(requests)}
    if state is not None:
        result["requestState"] = state
    return result


def raw_params(ctx: Ctx) -> Mapping[str, Any]:
    return ctx.params or {}


def responses(ctx: Ctx) -> dict[str, Any]:
    """The client's `inputResponses` as sent (an invalid shape was already refused by the SDK)."""
    value = raw_params(ctx).get("inputResponses")
    return value if isinstance(value, dict) else {}


def state(ctx: Ctx) -> str | None:
    """The echoed `requestState`, already verified and unsealed by `RequestStateBoundary`."""
    value = raw_params(ctx).get("requestState")
    return value if isinstance(value, str) else None


def accepted(answer: Any) -> dict[str, Any] | None:
    """The content of an accepted elicitation answer, None for anything else."""
    content = answer.get("content") if isinstance(answer, dict) and answer.get("action") == "accept" else None
    return cast(dict[str, Any], content) if isinstance(content, dict) else None


def sampled_text(answer: Any) -> str:
    content = answer.get("content") if isinstance(answer, dict) else None
    if isinstance(content, list):
        content = content[0] if content else None
    said = content.get("text") if isinstance(content, dict) else None
    return said if isinstance(said, str) else "(no text)"


def client_capabilities(ctx: Ctx) -> Mapping[str, Any]:
    """What the client declared: per request at 2026-07-28, at initialize before."""
    meta = raw_params(ctx).get("_meta")
    stated = meta.get("io.modelcontextprotocol/clientCapabilities") if isinstance(meta, dict) else None
    if isinstance(stated, dict):
        return cast(dict[str, Any], stated)
    declared = ctx.session.client_capabilities
    return declared.model_dump(by_alias=True, exclude_none=True) if declared is not None else {}


def modern(ctx: Ctx) -> bool:
    return ctx.protocol_version >= "2026-07-28"


async def log(ctx: Ctx, level: types.LoggingLevel, message: str) -> None:
    await ctx.session.send_log_message(level, message, logger=NAME, related_request_id=ctx.request_id)


async def ask(ctx: Ctx, key: str, request: Result) -> Any:
    """The client's answer to `request` (elicitation/create or sampling/createMessage) as wire JSON.

    Session era: sent to the client on the call's own stream, the answer awaited. 2026-07-28: the
    answer the client sent back in `inputResponses[key]`, or None when it has yet to be asked (the
    caller then answers `input_required`); with `--session-way`, sent as in the session era, which
    a 2026-07-28 connection refuses (NoBackChannelError).
    """
    if modern(ctx) and not SESSION_WAY:
        return responses(ctx).get(key)
    params = request["params"]
    if request["method"] == "elicitation/create":
        form = params["requestedSchema"]
        answer: Any = await ctx.session.elicit_form(params["message"], form, related_request_id=ctx.request_id)
    else:
        prompt = params["messages"][0]["content"]["text"]
        answer = await ctx.session.create_message(
            [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
            max_tokens=params["maxTokens"],
            related_request_id=ctx.request_id,
        )
    return answer.model_dump(by_alias=True, mode="json", exclude_none=True)


async def form_tool(ctx: Ctx, message: str, schema: Mapping[str, Any], said: str) -> Result:
    """Elicit one form and report the outcome as `<said>: action=..., content=...`."""
    request = elicitation(message, schema)
    answer = await ask(ctx, "form", request)
    if not isinstance(answer, dict):
        return input_required({"form": request})
    return text(f"{said}: action={answer.get('action')}, content={json.dumps(answer.get('content', {}))}")


# Tools: name -> (description, input schema, handler). Handlers take the context and the arguments.
Handler = Callable[[Ctx, dict[str, Any]], Awaitable[Result]]
TOOLS: dict[str, tuple[str, dict[str, Any], Handler]] = {}


def tool(name: str, description: str, schema: dict[str, Any] | None = None) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        TOOLS[name] = (description, schema or EMPTY, handler)
        return handler

    return register


@tool("test_simple_text", "Returns one text block.")
async def simple_text(ctx: Ctx, args: dict[str, Any]) -> Result:
    return text("This is a simple text response for testing.")


@tool("test_image_content", "Returns one PNG image block.")
async def image_content(ctx: Ctx, args: dict[str, Any]) -> Result:
    return {"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]}


@tool("test_audio_content", "Returns one WAV audio block.")
async def audio_content(ctx: Ctx, args: dict[str, Any]) -> Result:
    return {"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]}


@tool("test_embedded_resource", "Returns one embedded text resource.")
async def embedded_resource(ctx: Ctx, args: dict[str, Any]) -> Result:
    resource = {
        "uri": "test://embedded-resource",
        "mimeType": "text/plain",
        "text": "This is an embedded resource content.",
    }
    return {"content": [{"type": "resource", "resource": resource}]}


@tool("test_multiple_content_types", "Returns text, an image and an embedded resource.")
async def multiple_content_types(ctx: Ctx, args: dict[str, Any]) -> Result:
    resource = {
        "uri": "test://mixed-content-resource",
        "mimeType": "application/json",
        "text": json.dumps({"test": "data", "value": 123}),
    }
    return {
        "content": [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "resource", "resource": resource},
        ]
    }


@tool("test_tool_with_logging", "Sends three info log messages while it runs.")
async def tool_with_logging(ctx: Ctx, args: dict[str, Any]) -> Result:
    await log(ctx, "info", "Tool execution started")
    await anyio.sleep(0.05)
    await log(ctx, "info", "Tool processing data")
    await anyio.sleep(0.05)
    await log(ctx, "info", "Tool execution completed")
    return text("Tool with logging executed successfully")


@tool("test_logging_tool", "Logs one message; at 2026-07-28 only when the request asked for a log level.")
async def logging_tool(ctx: Ctx, args: dict[str, Any]) -> Result:
    await log(ctx, "info", "test_logging_tool ran")
    return text("logged")


@tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100 when given a progress token.")
async def tool_with_progress(ctx: Ctx, args: dict[str, Any]) -> Result:
    for step in (0, 50, 100):
        await ctx.session.report_progress(step, 100, f"Completed step {step} of 100")
        if step < 100:
            await anyio.sleep(0.05)
    meta = raw_params(ctx).get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return text(f"progress reported for token {token}")


@tool("test_error_handling", "Always fails with a tool error.")
async def error_handling(ctx: Ctx, args: dict[str, Any]) -> Result:
    return {"isError": True, **text("This tool intentionally returns an error for testing")}


def string_argument(name: str) -> dict[str, Any]:
    return {"type": "object", "properties": {name: {"type": "string"}}, "required": [name]}


def undeclared(ctx: Ctx, capability: str) -> Result | None:
    """A tool error when a session-era client did not declare what the tool needs to ask it."""
    if modern(ctx) or capability in client_capabilities(ctx):
        return None
    return {"isError": True, **text(f"The client did not declare the {capability} capability.")}


@tool("test_sampling", "Asks the client's model to answer the prompt (sampling).", string_argument("prompt"))
async def sampling_tool(ctx: Ctx, args: dict[str, Any]) -> Result:
    if refused := undeclared(ctx, "sampling"):
        return refused
    request = sampling(str(args.get("prompt", "")), 100)
    answer = await ask(ctx, "sampling", request)
    if not isinstance(answer, dict):
        return input_required({"sampling": request})
    return text(f"LLM response: {sampled_text(answer)}")


USER_FORM = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}


@tool("test_elicitation", "Asks the user for a name and an email (elicitation).", string_argument("message"))
async def elicitation_tool(ctx: Ctx, args: dict[str, Any]) -> Result:
    if refused := undeclared(ctx, "elicitation"):
        return refused
    return await form_tool(ctx, str(args.get("message", "")), USER_FORM, "User response")


DEFAULTS_FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
}


@tool("test_elicitation_sep1034_defaults", "Elicits a form whose fields all carry defaults (SEP-1034).")
async def elicitation_defaults(ctx: Ctx, args: dict[str, Any]) -> Result:
    return await form_tool(ctx, "Please review your details", DEFAULTS_FORM, "Elicitation completed")


ENUM_FORM = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}


@tool("test_elicitation_sep1330_enums", "Elicits a form with the five enum shapes of SEP-1330.")
async def elicitation_enums(ctx: Ctx, args: dict[str, Any]) -> Result:
    return await form_tool(ctx, "Please pick from each list", ENUM_FORM, "Elicitation completed")


@tool("test_streaming_elicitation", "Needs an answer from the user before it can finish.")
async def streaming_elicitation(ctx: Ctx, args: dict[str, Any]) -> Result:
    return await form_tool(ctx, "Continue?", {"type": "object", "properties": {}}, "Streamed elicitation")


@tool("test_reconnection", "Closes its SSE stream mid-call so the client has to resume (SEP-1699).")
async def reconnection(ctx: Ctx, args: dict[str, Any]) -> Result:
    await log(ctx, "info", "Before disconnect")
    if ctx.close_sse_stream is not None:
        await ctx.close_sse_stream()
    await anyio.sleep(0.2)
    await log(ctx, "info", "After reconnect")
    return text("Reconnection test completed")


@tool("test_missing_capability", "Needs the client's sampling capability; refuses with -32021 without it.")
async def missing_capability(ctx: Ctx, args: dict[str, Any]) -> Result:
    if "sampling" not in client_capabilities(ctx):
        raise MCPError(
            types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            "This tool needs the sampling capability, which the client did not declare.",
            {"requiredCapabilities": {"sampling": {}}},
        )
    return await sampling_tool(ctx, {"prompt": "Say hello"})


@tool("test_trigger_tool_change", "Announces a changed tool list to subscribed listeners.")
async def trigger_tool_change(ctx: Ctx, args: dict[str, Any]) -> Result:
    await BUS.publish(ToolsListChanged())
    if not modern(ctx):
        await ctx.session.send_tool_list_changed()
    return text("tool list change announced")


@tool("test_trigger_prompt_change", "Announces a changed prompt list to subscribed listeners.")
async def trigger_prompt_change(ctx: Ctx, args: dict[str, Any]) -> Result:
    await BUS.publish(PromptsListChanged())
    if not modern(ctx):
        await ctx.session.send_prompt_list_changed()
    return text("prompt list change announced")


@tool(
    "test_custom_headers",
    "Mirrors its region argument into the Mcp-Param-Region header (SEP-2243).",
    {
        "type": "object",
        "properties": {
            "region": {"type": "string", "description": "Where to run", "x-mcp-header": "Region"},
            "query": {"type": "string", "description": "Not mirrored into a header"},
        },
        "required": ["region"],
    },
)
async def custom_headers(ctx: Ctx, args: dict[str, Any]) -> Result:
    return text(f"region={args.get('region')}")


CONTACT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


@tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", CONTACT_SCHEMA)
async def json_schema_2020_12(ctx: Ctx, args: dict[str, Any]) -> Result:
    return text(f"contact: {json.dumps(args, sort_keys=True)}")


# The multi-round-trip (input_required) fixtures of SEP-2322, 2026-07-28 only.


@tool("test_input_required_result_elicitation", "Asks for the user's name, then greets them.")
async def ir_elicitation(ctx: Ctx, args: dict[str, Any]) -> Result:
    content = accepted(responses(ctx).get("user_name"))
    if content is None or not isinstance(content.get("name"), str):
        return input_required({"user_name": elicitation("What is your name?", NAME_FORM)})
    return text(f"Hello, {content['name']}!")


@tool("test_input_required_result_sampling", "Asks the client's model a question, then reports the answer.")
async def ir_sampling(ctx: Ctx, args: dict[str, Any]) -> Result:
    answer = responses(ctx).get("capital_question")
    if not isinstance(answer, dict):
        return input_required({"capital_question": sampling("What is the capital of France?", 100)})
    return text(f"The model answered: {sampled_text(answer)}")


@tool("test_input_required_result_list_roots", "Asks for the client's roots, then lists them.")
async def ir_list_roots(ctx: Ctx, args: dict[str, Any]) -> Result:
    answer = responses(ctx).get("client_roots")
    if not isinstance(answer, dict) or not isinstance(answer.get("roots"), list):
        return input_required({"client_roots": {"method": "roots/list", "params": {}}})
    uris = [root.get("uri") for root in answer["roots"] if isinstance(root, dict)]
    return text(f"Roots: {', '.join(str(uri) for uri in uris) or '(none)'}")


CONFIRM_FORM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


@tool("test_input_required_result_request_state", "Asks for a confirmation and checks its own echoed state.")
async def ir_request_state(ctx: Ctx, args: dict[str, Any]) -> Result:
    content = accepted(responses(ctx).get("confirm"))
    if content is None or state(ctx) != "awaiting-confirm":
        return input_required({"confirm": elicitation("Please confirm", CONFIRM_FORM)}, "awaiting-confirm")
    return text(f"state-ok: confirmed={content.get('ok')}")


@tool("test_input_required_result_multiple_inputs", "Asks for a name, a sampled greeting and the roots at once.")
async def ir_multiple_inputs(ctx: Ctx, args: dict[str, Any]) -> Result:
    answers = responses(ctx)
    if state(ctx) == "three-questions" and {"user_name", "greeting", "client_roots"} <= answers.keys():
        name = (accepted(answers["user_name"]) or {}).get("name")
        return text(f"{sampled_text(answers['greeting'])} {name}")
    requests = {
        "user_name": elicitation("What is your name?", NAME_FORM),
        "greeting": sampling("Generate a greeting", 50),
        "client_roots": {"method": "roots/list", "params": {}},
    }
    return input_required(requests, "three-questions")


@tool("test_input_required_result_multi_round", "Asks two questions in two rounds.")
async def ir_multi_round(ctx: Ctx, args: dict[str, Any]) -> Result:
    answers, round_state = responses(ctx), state(ctx)
    if round_state is not None and round_state.startswith("round-2:"):
        color = (accepted(answers.get("step2")) or {}).get("color")
        if isinstance(color, str):
            return text(f"{round_state.removeprefix('round-2:')} likes {color}.")
        name = round_state.removeprefix("round-2:")
    else:
        given = (accepted(answers.get("step1")) or {}).get("name") if round_state == "round-1" else None
        if not isinstance(given, str):
            return input_required({"step1": elicitation("Step 1: What is your name?", NAME_FORM)}, "round-1")
        name = given
    color_form = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
    return input_required({"step2": elicitation("Step 2: What is your favorite color?", color_form)}, f"round-2:{name}")


@tool("test_input_required_result_tampered_state", "Carries signed state; a modified state is refused.")
async def ir_tampered_state(ctx: Ctx, args: dict[str, Any]) -> Result:
    # The SDK's RequestStateBoundary seals the state and refuses a tampered echo (-32602) before
    # this handler runs, so the handler only ever sees the state it minted.
    content = accepted(responses(ctx).get("confirm"))
    if content is None or state(ctx) != "signed":
        return input_required({"confirm": elicitation("Please confirm", CONFIRM_FORM)}, "signed")
    return text("Request state verified; the call is complete.")


@tool("test_input_required_result_capabilities", "Asks only for the kinds of input the client declared.")
async def ir_capabilities(ctx: Ctx, args: dict[str, Any]) -> Result:
    declared, answers = client_capabilities(ctx), responses(ctx)
    requests: dict[str, Result] = {}
    if "elicitation" in declared and "user_name" not in answers:
        requests["user_name"] = elicitation("What is your name?", NAME_FORM)
    if "sampling" in declared and "greeting" not in answers:
        requests["greeting"] = sampling("Generate a greeting", 50)
    if requests:
        return input_required(requests)
    return text("Declared-capability input answered.")


# Resources, templates and prompts.

STATIC_TEXT = "This is the content of the static text resource."
RESOURCES: list[Result] = [
    {
        "uri": "test://static-text",
        "name": "static-text",
        "description": "A static text resource",
        "mimeType": "text/plain",
    },
    {"uri": "test://static-binary", "name": "static-binary", "description": "A 1x1 PNG image", "mimeType": "image/png"},
    {
        "uri": "test://watched-resource",
        "name": "watched-resource",
        "description": "A resource to subscribe to",
        "mimeType": "text/plain",
    },
]
TEMPLATE_PREFIX, TEMPLATE_SUFFIX = "test://template/", "/data"
SUBSCRIBED: set[str] = set()


async def read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> Result:
    uri = str(params.uri)
    if uri == "test://static-text":
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": STATIC_TEXT}]}
    if uri == "test://static-binary":
        return {"contents": [{"uri": uri, "mimeType": "image/png", "blob": PNG}]}
    if uri == "test://watched-resource":
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "Watched resource content"}]}
    if uri.startswith(TEMPLATE_PREFIX) and uri.endswith(TEMPLATE_SUFFIX):
        ident = uri[len(TEMPLATE_PREFIX) : -len(TEMPLATE_SUFFIX)]
        if ident and "/" not in ident:
            body = json.dumps({"id": ident, "templateTest": True, "data": f"Data for ID: {ident}"})
            return {"contents": [{"uri": uri, "mimeType": "application/json", "text": body}]}
    raise MCPError(types.INVALID_PARAMS, "Resource not found", {"uri": uri})


PROMPTS: list[Result] = [
    {"name": "test_simple_prompt", "description": "A prompt without arguments"},
    {
        "name": "test_prompt_with_arguments",
        "description": "A prompt with two required arguments",
        "arguments": [
            {"name": "arg1", "description": "First test argument", "required": True},
            {"name": "arg2", "description": "Second test argument", "required": True},
        ],
    },
    {
        "name": "test_prompt_with_embedded_resource",
        "description": "A prompt that embeds a resource",
        "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": True}],
    },
    {"name": "test_prompt_with_image", "description": "A prompt with an image"},
    {"name": "test_input_required_result_prompt", "description": "A prompt that asks the user for context first"},
]


def user(content: Result) -> Result:
    return {"role": "user", "content": content}


async def get_prompt(ctx: Ctx, params: types.GetPromptRequestParams) -> Result:
    args = params.arguments or {}
    if params.name == "test_simple_prompt":
        return {"messages": [user({"type": "text", "text": "This is a simple prompt for testing."})]}
    if params.name == "test_prompt_with_arguments":
        said = f"Prompt with arguments: arg1='{args.get('arg1')}', arg2='{args.get('arg2')}'"
        return {"messages": [user({"type": "text", "text": said})]}
    if params.name == "test_prompt_with_embedded_resource":
        resource = {
            "uri": args.get("resourceUri", "test://example-resource"),
            "mimeType": "text/plain",
            "text": "Embedded resource content for testing.",
        }
        return {
            "messages": [
                user({"type": "resource", "resource": resource}),
                user({"type": "text", "text": "Please process the embedded resource above."}),
            ]
        }
    if params.name == "test_prompt_with_image":
        return {
            "messages": [
                user({"type": "image", "data": PNG, "mimeType": "image/png"}),
                user({"type": "text", "text": "Please analyze the image above."}),
            ]
        }
    if params.name == "test_input_required_result_prompt":
        content = accepted(responses(ctx).get("user_context"))
        if content is None:
            form = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}
            return input_required({"user_context": elicitation("What context should the prompt use?", form)})
        return {"messages": [user({"type": "text", "text": f"Use this context: {content.get('context')}"})]}
    raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")


async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Result:
    tools = [{"name": name, "description": info[0], "inputSchema": info[1]} for name, info in TOOLS.items()]
    return {"tools": tools}


async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> Result:
    entry = TOOLS.get(params.name)
    if entry is None:
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
    return await entry[2](ctx, dict(params.arguments or {}))


async def list_resources(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Result:
    return {"resources": RESOURCES}


async def list_templates(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Result:
    template = {
        "uriTemplate": "test://template/{id}/data",
        "name": "template",
        "description": "A resource template with one parameter",
        "mimeType": "application/json",
    }
    return {"resourceTemplates": [template]}


async def subscribe(ctx: Ctx, params: types.SubscribeRequestParams) -> Result:
    SUBSCRIBED.add(str(params.uri))
    return {}


async def unsubscribe(ctx: Ctx, params: types.UnsubscribeRequestParams) -> Result:
    SUBSCRIBED.discard(str(params.uri))
    return {}


async def list_prompts(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Result:
    return {"prompts": PROMPTS}


async def complete(ctx: Ctx, params: types.CompleteRequestParams) -> Result:
    return {"completion": {"values": [], "total": 0, "hasMore": False}}


async def set_level(ctx: Ctx, params: types.SetLevelRequestParams) -> Result:
    return {}


def completed(handler: Callable[[Ctx, Any], Awaitable[Result]]) -> Callable[[Ctx, Any], Awaitable[Result]]:
    """At 2026-07-28 every result names its type; the handlers here answer plain wire mappings."""

    async def answer(ctx: Ctx, params: Any) -> Result:
        result = await handler(ctx, params)
        if modern(ctx) and "resultType" not in result:
            return {"resultType": "complete", **result}
        return result

    return answer


def tool_schema(name: str) -> Mapping[str, Any] | None:
    entry = TOOLS.get(name)
    return entry[1] if entry else None


BUS = InMemorySubscriptionBus()


def build() -> Server[Any]:
    handlers: dict[str, Any] = {
        "on_list_tools": completed(list_tools),
        "on_call_tool": completed(call_tool),
        "on_list_resources": completed(list_resources),
        "on_list_resource_templates": completed(list_templates),
        "on_read_resource": completed(read_resource),
        "on_subscribe_resource": completed(subscribe),
        "on_unsubscribe_resource": completed(unsubscribe),
        "on_list_prompts": completed(list_prompts),
        "on_get_prompt": completed(get_prompt),
        "on_completion": completed(complete),
        "on_set_logging_level": completed(set_level),
        "on_subscriptions_listen": ListenHandler(BUS),
    }
    # The fixtures never change, so their lists and reads may be cached and shared for a minute.
    hint = CacheHint(ttl_ms=60_000, scope="public")
    hints: dict[Any, CacheHint] = {method: hint for method in CACHEABLE_METHODS}
    server: Server[Any] = Server(
        NAME, version="1.0.0", cache_hints=hints, get_tool_input_schema=tool_schema, **handlers
    )
    server.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=NAME))
    return server


class MemoryEventStore(EventStore):
    """Every SSE event of the process, so a client can resume a stream with Last-Event-ID."""

    def __init__(self) -> None:
        self._events: list[tuple[str, str, JSONRPCMessage | None]] = []
        self._ids = count(1)

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = str(next(self._ids))
        self._events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        stream = next((s for s, e, _ in self._events if e == last_event_id), None)
        if stream is None:
            return None
        for s, event_id, message in self._events:
            if s == stream and int(event_id) > int(last_event_id) and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def serve_http(server: Server[Any]) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue from now on, so the port can be announced before uvicorn runs
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    app = server.streamable_http_app(event_store=MemoryEventStore(), retry_interval=100)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")).run(sockets=[sock])


async def serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP on 127.0.0.1 instead of stdio")
    parser.add_argument("--session-way", action="store_true", help="ask for sampling and elicitation by server request")
    options = parser.parse_args()
    global SESSION_WAY
    SESSION_WAY = options.session_way
    server = build()
    if options.http:
        serve_http(server)
    else:
        anyio.run(serve_stdio, server)


if __name__ == "__main__":
    main()
