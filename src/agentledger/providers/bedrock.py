"""Amazon Bedrock Converse: transcript <-> ``converse`` arguments, response and stream decoding.

Encoding ([T7]): leading system messages become ``system`` blocks; each other
part becomes one content block, in order. Bedrock wants user and assistant
turns to alternate, so consecutive messages of one role are sent as one
Bedrock message (their blocks concatenated in order). A `CacheCheckpointPart`
is a ``cachePoint`` block where it stands (a checkpoint that starts a message
closes the previous one; a run of checkpoints is one boundary); more than
``options["max_cache_checkpoints"]`` (default 4, Bedrock's limit for Claude)
is a `TranscriptError`. With thinking on, `validate_bedrock` runs first ([T6]).

What Bedrock cannot carry is refused, naming the part: empty text, image URLs
other than ``s3://``, documents without a Bedrock format or with a name Bedrock
refuses, citations not in Bedrock's shape, tool-use ids outside
``[a-zA-Z0-9_.:-]{1,64}``, reasoning another provider produced, and numbers
boto3 would change: boto3 writes JSON with the standard library, so tool
inputs and results are sent as floats and a `JsonNumber` whose value a float
cannot hold exactly (``0.1000000000000000000001``) is refused.

Tool names are mapped to ``[a-zA-Z0-9_-]{1,64}`` (`agentledger.providers._names`).

Decoding reads the dict boto3 returns; blob fields may be bytes (boto3) or
base64 text (the wire JSON). ``reasoningContent`` becomes a `ThinkingPart`
(``meta={"bedrock": {"reasoning": [...]}}``), ``citationsContent`` a
`CitationsPart` whose citations keep Bedrock's ``location`` object.

Stop reasons: ``end_turn``, ``tool_use``, ``max_tokens``, ``stop_sequence`` keep
their names; ``guardrail_intervened`` and ``content_filtered`` ->
``content_filter``; ``model_context_window_exceeded`` -> ``max_tokens``; the
rest -> ``other``.

Extra options: ``max_cache_checkpoints`` (int), ``additional_fields`` (dict,
merged into ``additionalModelRequestFields``; thinking sends Anthropic's
``{"thinking": {"type": "enabled", "budget_tokens": n}}`` there).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any, Self

from agentledger.errors import TransientError
from agentledger.providers._bedrock_encode import encode
from agentledger.providers._errors import (
    bad_response,
    by_status,
    connection_lost,
    missing_sdk,
    truncated,
)
from agentledger.providers._json import b64decode, loads
from agentledger.providers._names import ToolNames
from agentledger.providers._options import options_for
from agentledger.providers._transcript import assistant_message, drain_stream, tool_names_for
from agentledger.providers.model import (
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    StopReason,
    StreamEnd,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
    Usage,
)
from agentledger.transcript import (
    Citation,
    CitationsPart,
    Part,
    TextPart,
    ThinkingPart,
    ToolUsePart,
)

__all__ = ["PROVIDER", "BedrockClient", "StreamDecoder", "decode", "decode_stream", "encode"]

PROVIDER = "bedrock"
_STOP: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
    "model_context_window_exceeded": "max_tokens",
}
_TRANSIENT_CODES = frozenset(
    code.lower()
    for code in (
        "ThrottlingException",
        "ServiceUnavailableException",
        "InternalServerException",
        "ModelTimeoutException",
        "ModelNotReadyException",
        "ModelStreamErrorException",
    )
)


def _blob(value: Any, field: str) -> bytes:
    """Bytes from boto3 (bytes) or the wire JSON (base64 text)."""
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        try:
            return b64decode(value)
        except ValueError:
            pass
    raise bad_response(PROVIDER, field, "bytes or base64 text", value)


def _citation(raw: Mapping[str, Any]) -> Citation:
    return Citation(
        title=raw.get("title") or "",
        source=raw.get("source") or "",
        location=dict(raw["location"]) if raw.get("location") else None,
        source_content=tuple(item.get("text", "") for item in raw.get("sourceContent") or ()),
    )


def _part(index: int, block: Mapping[str, Any], names: ToolNames) -> Part:
    where = f"output.message.content[{index}]"
    if "text" in block:
        return TextPart(text=block["text"])
    if "reasoningContent" in block:
        reasoning = block["reasoningContent"]
        if "redactedContent" in reasoning:
            redacted = _blob(reasoning["redactedContent"], where + ".redactedContent")
            return ThinkingPart(redacted=redacted, index=index, final=True)
        text = reasoning.get("reasoningText") or {}
        return ThinkingPart(
            text=text.get("text", ""), signature=text.get("signature", ""), index=index, final=True
        )
    if "toolUse" in block:
        use = block["toolUse"]
        if not isinstance(use.get("input"), dict):
            raise bad_response(
                PROVIDER, where + ".toolUse.input", "a JSON object", use.get("input")
            )
        return ToolUsePart(
            id=use["toolUseId"], name=names.canonical(use["name"]), input=use["input"]
        )
    if "citationsContent" in block:
        cited = block["citationsContent"]
        return CitationsPart(
            text="".join(item.get("text", "") for item in cited.get("content") or ()),
            citations=tuple(_citation(c) for c in cited.get("citations") or ()),
        )
    raise bad_response(
        PROVIDER, where, "text, reasoningContent, toolUse or citationsContent", sorted(block)
    )


def decode(
    response: Mapping[str, Any], tool_names: ToolNames | None = None, model: str = ""
) -> ModelResponse:
    """The `ModelResponse` for a ``converse`` result (Bedrock does not echo the model: pass it).

    Raises:
        TranscriptError: the response holds a block we cannot represent.
    """
    names = tool_names or ToolNames()
    message = (response.get("output") or {}).get("message") or {}
    content = message.get("content")
    if not isinstance(content, list):
        raise bad_response(PROVIDER, "output.message.content", "a list of blocks", content)
    parts = [_part(index, block, names) for index, block in enumerate(content)]
    usage = response.get("usage") or {}
    return ModelResponse(
        message=assistant_message(PROVIDER, parts),
        stop_reason=_STOP.get(response.get("stopReason") or "", "other"),
        usage=Usage(
            input_tokens=usage.get("inputTokens") or 0,
            output_tokens=usage.get("outputTokens") or 0,
            cache_read_tokens=usage.get("cacheReadInputTokens") or 0,
            cache_write_tokens=usage.get("cacheWriteInputTokens") or 0,
        ),
        model=model,
    )


class _Block:
    """What the stream said so far about one content block."""

    def __init__(self) -> None:
        self.tool: dict[str, Any] | None = None
        self.text: list[str] = []
        self.reasoning = False
        self.signature: list[str] = []
        self.redacted: bytes | None = None
        self.json: list[str] = []
        self.citations: list[dict[str, Any]] = []

    def build(self, where: str) -> dict[str, Any]:
        if self.tool is not None:
            text = "".join(self.json)
            try:
                tool_input = loads(text) if text else {}
            except ValueError:
                raise bad_response(PROVIDER, where + ".toolUse.input", "JSON", text) from None
            return {"toolUse": {**self.tool, "input": tool_input}}
        if self.redacted is not None:
            return {"reasoningContent": {"redactedContent": self.redacted}}
        if self.reasoning:
            reasoning = {"text": "".join(self.text)}
            if self.signature:
                reasoning["signature"] = "".join(self.signature)
            return {"reasoningContent": {"reasoningText": reasoning}}
        if self.citations:
            return {
                "citationsContent": {
                    "content": [{"text": "".join(self.text)}],
                    "citations": self.citations,
                }
            }
        return {"text": "".join(self.text)}


class StreamDecoder:
    """Folds ``converse_stream`` events into `ModelStreamEvent`\\ s.

    Bedrock sends usage after ``messageStop``, so `end` (called when the stream
    closes) returns the `StreamEnd`; its response equals `decode` of the same content.
    """

    def __init__(self, tool_names: ToolNames | None = None, model: str = "") -> None:
        self._names = tool_names or ToolNames()
        self._model = model
        self._blocks: dict[int, _Block] = {}
        self._stop: str | None = None
        self._usage: dict[str, Any] = {}

    def _block(self, index: int) -> _Block:
        return self._blocks.setdefault(index, _Block())

    def feed(self, event: Mapping[str, Any]) -> list[ModelStreamEvent]:
        """The events one Converse stream event yields.

        Raises:
            TransientError: a throttling, unavailable or internal-error event.
            ProviderError: any other exception event.
        """
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]
            tool = (start.get("start") or {}).get("toolUse")
            if tool is None:
                return []
            index = start["contentBlockIndex"]
            block = self._block(index)
            block.tool = {"toolUseId": tool["toolUseId"], "name": tool["name"]}
            name = self._names.canonical(tool["name"])
            return [ToolUseStart(index=index, id=tool["toolUseId"], name=name)]
        if "contentBlockDelta" in event:
            return self._delta(event["contentBlockDelta"])
        if "messageStop" in event:
            self._stop = event["messageStop"].get("stopReason") or ""
            return []
        if "metadata" in event:
            self._usage = dict(event["metadata"].get("usage") or {})
            return []
        for key, value in event.items():
            if key.endswith("Exception"):
                message = str((value or {}).get("message", ""))
                if key.lower() in _TRANSIENT_CODES:
                    raise TransientError(
                        f"{PROVIDER}: {key}: {message}", operation="converse_stream"
                    )
                raise by_status(PROVIDER, "converse_stream", 400, f"{key}: {message}")
        return []  # messageStart, contentBlockStop, and event types added later

    def _delta(self, event: Mapping[str, Any]) -> list[ModelStreamEvent]:
        index = event["contentBlockIndex"]
        delta = event.get("delta") or {}
        block = self._block(index)
        if "text" in delta:
            block.text.append(delta["text"])
            return [TextDelta(index=index, text=delta["text"])]
        if "toolUse" in delta:
            block.json.append(delta["toolUse"]["input"])
            return [ToolInputDelta(index=index, partial_json=delta["toolUse"]["input"])]
        if "reasoningContent" in delta:
            reasoning = delta["reasoningContent"]
            block.reasoning = True
            if "redactedContent" in reasoning:
                piece = _blob(reasoning["redactedContent"], f"content[{index}].redactedContent")
                block.redacted = (block.redacted or b"") + piece
                return []
            if "signature" in reasoning:
                block.signature.append(reasoning["signature"])
                return []
            block.text.append(reasoning.get("text", ""))
            return [ThinkingDelta(index=index, text=reasoning.get("text", ""))]
        if "citation" in delta:
            block.citations.append(dict(delta["citation"]))
            return []
        return []

    def end(self) -> list[ModelStreamEvent]:
        """The final `StreamEnd`, once the stream has closed.

        Raises:
            TransientError: ``messageStop`` never came.
        """
        if self._stop is None:
            raise truncated(PROVIDER, "converse_stream", "no messageStop event")
        content = [self._blocks[i].build(f"content[{i}]") for i in sorted(self._blocks)]
        response = {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": self._stop,
            "usage": self._usage,
        }
        return [StreamEnd(response=decode(response, self._names, self._model))]


def decode_stream(
    events: Iterable[Mapping[str, Any]], tool_names: ToolNames | None = None, model: str = ""
) -> list[ModelStreamEvent]:
    """All events a whole recorded Converse stream yields, ending with `StreamEnd`."""
    return drain_stream(StreamDecoder(tool_names, model), events)


_DONE = object()


class BedrockClient:
    """A `ModelClient` on boto3 ``bedrock-runtime`` ``converse``/``converse_stream``.

    boto3 is synchronous, so each call (and each read of a stream) runs in a
    worker thread (`asyncio.to_thread`). botocore's own retries are off
    (``total_max_attempts=1``): retries belong to the runtime. Throttling,
    unavailable, internal and timeout errors, 429/5xx, and connection failures
    -> `TransientError`; other client errors -> `ProviderError`.
    """

    provider = PROVIDER

    def __init__(
        self,
        *,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        read_timeout: float = 600.0,
        client: Any = None,
    ) -> None:
        """Build the boto3 client (credentials and region from the usual AWS sources if not given).

        Raises:
            ImportError: ``boto3`` is not installed.
        """
        try:  # boto3 ships no type hints: treat it as Any
            boto3: Any = importlib.import_module("boto3")
            config_module: Any = importlib.import_module("botocore.config")
            self._exceptions: Any = importlib.import_module("botocore.exceptions")
            self._urllib3: Any = importlib.import_module("urllib3.exceptions")
        except ImportError as error:
            raise missing_sdk("boto3", "bedrock") from error
        if client is None:
            config = config_module.Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                read_timeout=read_timeout,
                connect_timeout=30,
            )
            client = boto3.client(
                "bedrock-runtime",
                region_name=region_name,
                endpoint_url=endpoint_url,
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key,
                aws_session_token=aws_session_token,
                config=config,
            )
        self._client: Any = client

    async def aclose(self) -> None:
        """Close the boto3 client and its connections."""
        await asyncio.to_thread(self._client.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _map(self, error: Exception, operation: str) -> Exception | None:
        exceptions = self._exceptions
        if isinstance(error, exceptions.ClientError):
            info = error.response.get("Error") or {}
            code = str(info.get("Code", ""))
            status = int((error.response.get("ResponseMetadata") or {}).get("HTTPStatusCode", 0))
            body = f"{code}: {info.get('Message', '')}"
            if code.lower() in _TRANSIENT_CODES:
                return TransientError(f"{PROVIDER} answered {body}", operation=operation)
            return by_status(PROVIDER, operation, status or 400, body)
        connection = (
            exceptions.ConnectionError,
            exceptions.HTTPClientError,
            exceptions.ReadTimeoutError,
            exceptions.ResponseStreamingError,
            exceptions.IncompleteReadError,
            self._urllib3.HTTPError,  # a stream cut mid-read surfaces as urllib3's ProtocolError
        )
        if isinstance(error, connection):
            return connection_lost(PROVIDER, operation, error)
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Call ``converse`` and decode the whole answer."""
        payload = encode(request.messages, request.tools, options_for(request))
        names = tool_names_for(request.messages, request.tools)
        try:
            response = await asyncio.to_thread(self._client.converse, **payload)
        except Exception as error:
            mapped = self._map(error, "converse")
            if mapped is None:
                raise
            raise mapped from error
        return decode(response, names, request.model)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Call ``converse_stream`` and yield deltas, then `StreamEnd`."""
        payload = encode(request.messages, request.tools, options_for(request))
        decoder = StreamDecoder(tool_names_for(request.messages, request.tools), request.model)
        stream: Any = None
        try:
            response = await asyncio.to_thread(self._client.converse_stream, **payload)
            stream = response["stream"]
            events: Iterator[Any] = iter(stream)
            while True:
                event: Any = await asyncio.to_thread(next, events, _DONE)
                if event is _DONE:
                    break
                for out in decoder.feed(event):
                    yield out
            for out in decoder.end():
                yield out
        except Exception as error:
            mapped = self._map(error, "converse_stream")
            if mapped is None:
                raise
            raise mapped from error
        finally:
            if stream is not None:
                stream.close()
