"""The baseline: a bare MCP SDK low-level server (streamable HTTP), one tool.

python bench/_bare_server.py PORT echo                 # echoes its arguments
python bench/_bare_server.py PORT model BASE_URL       # makes one openai-SDK model call per tool call
"""

from __future__ import annotations

import json
import sys
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings

PORT, MODE = int(sys.argv[1]), sys.argv[2]
TOOL = types.Tool(
    name="set_quantity",
    input_schema={"type": "object", "properties": {"name": {"type": "string"}, "qty": {"type": "integer"}}},
)


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[TOOL])


if MODE == "model":
    import openai

    client = openai.AsyncOpenAI(base_url=sys.argv[3], api_key="x", max_retries=0)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = dict(params.arguments or {})
    if MODE == "model":
        prompt = (
            f'Current state:\n{{"items": {{"milk": {{"qty": 0}}}}}}\n\nCall: {params.name}\n'
            f"Arguments: {json.dumps(arguments, separators=(',', ':'))}"
        )
        response = await client.chat.completions.create(
            model="fake",
            messages=[{"role": "system", "content": "simulate"}, {"role": "user", "content": prompt}],
            max_tokens=256,
        )
        arguments = json.loads(response.choices[0].message.content or "{}").get("output") or arguments
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(arguments))], structured_content=arguments
    )


server = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
security = TransportSecuritySettings(
    enable_dns_rebinding_protection=True, allowed_hosts=["127.0.0.1:*"], allowed_origins=["http://127.0.0.1:*"]
)
app = server.streamable_http_app(transport_security=security)
uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning", backlog=4096)
