"""The handshakes the router answers itself: a session-era client's `initialize` and a
2026-07-28 client's `server/discover`, over one or several upstreams.

With one upstream the answer is the upstream's own (passed through); with several it is merged:
every capability any of them has, their instructions tagged with their names, and, for
discover, the smallest cache TTL and the narrowest scope of the parts (an upstream that could
not be described makes the answer uncacheable).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import msgspec

from frugal_proxy import __version__
from frugal_proxy.bridge.link import Client, UpstreamLink
from frugal_proxy.errors import ProxyError, UpstreamDown
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.providers.own_tools import LISTING_SCOPE, LISTING_TTL_MS

log = logging.getLogger("frugal_proxy.session")


class Handshakes:
    def __init__(self, links: list[UpstreamLink], client: Client, own_tools: bool) -> None:
        self.links = links
        self.client = client
        self.own_tools = own_tools
        self.single = len(links) == 1

    def assume_initialized(self, version: str) -> None:
        """Serve a session-era client that initialized elsewhere in its era: a request of one
        reached a stateless endpoint whose router no initialize has reached (a load balancer
        spreads a --stateless fleet's requests over every replica). Its MCP-Protocol-Version
        header names the version; its capabilities are unknown, and nothing is sent to a
        stateless client unasked anyway. A router another client initialized is left as it is."""
        if self.client.era is None:
            self.client.era = "legacy"
            self.client.protocol_version = version

    async def initialize(self, params: dict[str, msgspec.Raw]) -> Frame:
        decoded = {key: jsonrpc.decode_any(value) for key, value in params.items()}
        self.client.era = "legacy"
        capabilities = decoded.get("capabilities")
        self.client.capabilities = capabilities if isinstance(capabilities, dict) else {}
        info = decoded.get("clientInfo")
        self.client.client_info = info if isinstance(info, dict) else None
        if self.single:
            reply = await self.links[0].initialize_for_client(decoded, passthrough=True)
            self.client.protocol_version = _reply_version(reply)
            return reply
        answers = await self._each_link(lambda link: link.initialize_for_client(decoded, passthrough=True))
        version = eras.negotiate_handshake(decoded.get("protocolVersion"))
        self.client.protocol_version = version
        capabilities_seen: list[dict[str, Any]] = []
        instructions: list[str] = []
        for link, reply in answers:
            body = jsonrpc.decode_any(reply["result"]) if "result" in reply else {}
            if isinstance(body, dict):
                capabilities_seen.append(body.get("capabilities") or {})
                if body.get("instructions"):
                    instructions.append(f"[{link.name}] {body['instructions']}")
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": merge_capabilities(capabilities_seen, self.own_tools),
            "serverInfo": {"name": "frugal-proxy", "version": __version__},
        }
        if instructions:
            result["instructions"] = "\n".join(instructions)
        return jsonrpc.result(None, result)

    async def discover(self, client: Client | None = None) -> Frame:
        """The answer to `server/discover`; a session-era upstream is initialized declaring what
        `client` (the request's) declared."""
        own = self.own_tools
        if self.single:
            body = await self.links[0].describe_for_modern(client)
            if own:
                ttl = body.get("ttlMs")
                body["ttlMs"] = min(ttl if isinstance(ttl, int) and ttl >= 0 else 0, LISTING_TTL_MS)
            return jsonrpc.result(None, body)
        answers = await self._each_link(lambda link: link.describe_for_modern(client))
        capabilities_seen: list[dict[str, Any]] = []
        instructions: list[str] = []
        ttls: list[int] = [LISTING_TTL_MS] if own else []
        public = LISTING_SCOPE == "public"
        if len(answers) < len(self.links):  # an upstream could not be described: do not cache the rest
            ttls.append(0)
            public = False
        for link, body in answers:
            capabilities_seen.append(body.get("capabilities") or {})
            if body.get("instructions"):
                instructions.append(f"[{link.name}] {body['instructions']}")
            ttls.append(body.get("ttlMs") if isinstance(body.get("ttlMs"), int) else 0)
            public = public and body.get("cacheScope") == "public"
        result: dict[str, Any] = {
            "resultType": "complete",
            "supportedVersions": list(eras.MODERN_VERSIONS),
            "capabilities": merge_capabilities(capabilities_seen, self.own_tools),
            "_meta": {eras.META_SERVER_INFO: {"name": "frugal-proxy", "version": __version__}},
            "ttlMs": min(ttls) if ttls else 0,
            "cacheScope": "public" if public and ttls else "private",
        }
        if instructions:
            result["instructions"] = "\n".join(instructions)
        return jsonrpc.result(None, result)

    async def _each_link(self, action: Any) -> list[tuple[UpstreamLink, Any]]:
        """Run an action on every link at once; an upstream that is down is left out, logged."""
        answers: dict[str, Any] = {}

        async def one(link: UpstreamLink) -> None:
            try:
                answers[link.name] = await action(link)
            except (UpstreamDown, ProxyError) as exc:
                log.warning("upstream left out", extra={"upstream": link.name, "reason": str(exc)[:200]})

        async with anyio.create_task_group() as tg:
            for link in self.links:
                tg.start_soon(one, link)
        return [(link, answers[link.name]) for link in self.links if link.name in answers]


def merge_capabilities(parts: list[dict[str, Any]], own_tools: bool) -> dict[str, Any]:
    """What several upstreams offer together: each capability any of them has, with its flags."""
    merged: dict[str, Any] = {}
    for capabilities in parts:
        for key, value in capabilities.items():
            if isinstance(value, dict):
                section = merged.setdefault(key, {})
                if isinstance(section, dict):
                    for flag, setting in value.items():
                        if setting or flag not in section:
                            section[flag] = setting
            else:
                merged.setdefault(key, value)
    if own_tools:
        merged.setdefault("tools", {})
    return merged


def _reply_version(reply: Frame) -> str | None:
    if "result" not in reply:
        return None
    body = jsonrpc.decode_any(reply["result"])
    version = body.get("protocolVersion") if isinstance(body, dict) else None
    return version if isinstance(version, str) else None
