"""Tool calling as pure text functions: the call formats of the big model families,
reading calls out of replies (whole or streamed), and the chat-template side.

``ToolCall``, ``FORMATS``/``detect_format``, ``ToolCallStream``/``parse_tool_calls`` and
the ``prompt`` helpers; nothing here touches a model, so the server and the tests use
the same functions.
Tests: tests/toolcall/.
"""

from .calls import ToolCall
from .formats import FORMATS, PARSERS, CallFormat, detect_format, new_call_id
from .stream import CallDelta, ContentDelta, Parsed, ToolCallStream, parse_tool_calls

__all__ = ["FORMATS", "PARSERS", "CallDelta", "CallFormat", "ContentDelta", "Parsed", "ToolCall",
           "ToolCallStream", "detect_format", "new_call_id", "parse_tool_calls"]
