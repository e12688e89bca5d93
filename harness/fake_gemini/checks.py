"""A request checked the way the fake checks it: routed, authenticated, validated.

The request must be the one the producer's Gemini source sends (``protocol`` says why):
``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` for a model of
``scripts.SCRIPTS``, the API key in the ``x-goog-api-key`` header (never in the URL), one
user turn, a system instruction and a JSON-only ``generationConfig``. Anything else is
refused with :class:`~harness.fake_gemini.protocol.HttpError`: 404 NOT_FOUND, 400
INVALID_ARGUMENT, and for the key 401/403 (or, with ``google_auth_errors``, Google's own
403 and 400 ``API_KEY_INVALID``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

from harness.fake_gemini.http1 import Request
from harness.fake_gemini.protocol import HttpError, Turn
from harness.fake_gemini.scripts import CHAT_MODELS, DEFAULT_MODEL, SCRIPTS

_PATH_RE = re.compile(r"^/v1beta/models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)$")


def check(
    request: Request, entry: dict[str, Any], *, api_key: str, google_auth_errors: bool
) -> Turn:
    """Route, authenticate and validate (the log ``entry`` gets the model and the script);
    raise :class:`HttpError` to refuse."""
    match = _PATH_RE.match(entry["path"])
    if match is None:
        raise HttpError(
            404, "NOT_FOUND", f"The requested URL {entry['path']} was not found on this server."
        )
    model = unquote(match["model"])
    entry["model"] = model
    if match["method"] != "streamGenerateContent" or request.method != "POST":
        raise HttpError(
            404,
            "NOT_FOUND",
            f"{request.method} models/{model}:{match['method']} is not served by this fake.",
        )
    query: dict[str, str] = entry["query"]
    if "key" in query:
        raise HttpError(
            400,
            "INVALID_ARGUMENT",
            "An API key in the URL query (?key=) is refused: send it in the x-goog-api-key header.",
        )
    check_key(request.headers.get("x-goog-api-key"), api_key, google_auth_errors)
    if query.get("alt") != "sse":
        raise HttpError(
            400, "INVALID_ARGUMENT", "This fake serves streamGenerateContent only with alt=sse."
        )
    if model not in SCRIPTS and model not in CHAT_MODELS:
        raise HttpError(
            404,
            "NOT_FOUND",
            f"models/{model} is not found for API version v1beta, "
            "or is not supported for generateContent.",
        )
    entry["script"] = "ok" if model == DEFAULT_MODEL else model
    body = entry["body"]
    if body is None and request.body:
        raise HttpError(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
    return validate(model, body)


def check_key(key: str | None, api_key: str, google_auth_errors: bool) -> None:
    """Refuse unless ``key`` is ``api_key``: as this fake does, or (``google_auth_errors``)
    as Google does."""
    if key == api_key:
        return
    if google_auth_errors:
        if not key:
            raise HttpError(
                403,
                "PERMISSION_DENIED",
                "Method doesn't allow unregistered callers (callers without established "
                "identity). Please use API Key or other form of API consumer identity "
                "to call this API.",
            )
        message = "API key not valid. Please pass a valid API key."
        raise HttpError(
            400,
            "INVALID_ARGUMENT",
            message,
            [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                },
                {
                    "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
                    "locale": "en-US",
                    "message": message,
                },
            ],
        )
    if not key:
        raise HttpError(
            401,
            "UNAUTHENTICATED",
            "Request is missing an API key: pass it in the x-goog-api-key header.",
        )
    raise HttpError(403, "PERMISSION_DENIED", "API key not valid. Please pass a valid API key.")


def _bad(message: str) -> HttpError:
    return HttpError(400, "INVALID_ARGUMENT", message)


def validate(model: str, body: Any) -> Turn:
    """The request shape the adapter must send; 400 INVALID_ARGUMENT otherwise."""
    if not isinstance(body, dict):
        raise _bad("Invalid JSON payload received: the body must be a JSON object.")
    if model in CHAT_MODELS:
        return chat_turn(model, body)
    config = body.get("generationConfig")
    if isinstance(config, dict) and "responseMimeType" not in config:
        return _text_turn(model, body, config)
    user_text = _user_text(body.get("contents"))
    system = body.get("systemInstruction")
    system_text = _first_text(system) if isinstance(system, dict) else None
    if system_text is None:
        raise _bad("systemInstruction.parts[0].text must be a string.")
    schema, max_tokens = _generation_config(body.get("generationConfig"))
    return Turn(model, system_text, user_text, schema, max_tokens)


def _text_turn(model: str, body: dict[str, Any], config: dict[str, Any]) -> Turn:
    """A text request: one or more user turns, an optional system instruction, and a
    generationConfig with no response schema (its maxOutputTokens only)."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise _bad("contents must be a non-empty list of user turns.")
    texts = []
    for turn in contents:
        text = _first_text(turn) if isinstance(turn, dict) else None
        if text is None or turn.get("role", "user") != "user":
            raise _bad("each of contents must be a user turn with a text part.")
        texts.append(text)
    system = body.get("systemInstruction")
    system_text = _first_text(system) if isinstance(system, dict) else ""
    if set(config) - {"maxOutputTokens"}:
        raise _bad("a text request's generationConfig has only maxOutputTokens here.")
    max_tokens = config.get("maxOutputTokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens <= 0:
        raise _bad("generationConfig.maxOutputTokens must be a positive integer.")
    return Turn(model, system_text or "", texts[-1], None, max_tokens)


def _user_text(contents: Any) -> str:
    """The one user turn's text."""
    if not isinstance(contents, list) or len(contents) != 1 or not isinstance(contents[0], dict):
        raise _bad("contents must be a list holding exactly one user turn.")
    turn = contents[0]
    if turn.get("role", "user") != "user":
        raise _bad("contents[0].role must be 'user'.")
    user_text = _first_text(turn)
    if user_text is None:
        raise _bad("contents[0].parts[0].text must be a string.")
    return user_text


def _generation_config(config: Any) -> tuple[dict[str, Any], int]:
    """The response schema and maxOutputTokens of a JSON-only generationConfig."""
    if not isinstance(config, dict):
        raise _bad("generationConfig must be an object.")
    if config.get("responseMimeType") != "application/json":
        raise _bad("generationConfig.responseMimeType must be 'application/json'.")
    schema = config.get("responseJsonSchema")
    if not isinstance(schema, dict):
        raise _bad("generationConfig.responseJsonSchema must be a JSON Schema object.")
    if "responseSchema" in config:
        raise _bad("responseSchema must be omitted when responseJsonSchema is set.")
    max_tokens = config.get("maxOutputTokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens <= 0:
        raise _bad("generationConfig.maxOutputTokens must be a positive integer.")
    return schema, max_tokens


def _first_text(content: dict[str, Any]) -> str | None:
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts or not isinstance(parts[0], dict):
        return None
    text = parts[0].get("text")
    return text if isinstance(text, str) else None


#: What a chat request's part may hold: one of text, functionCall, functionResponse; a
#: text may be a thought; any of them may carry the signature a reply gave with it.
_CHAT_PART_KEYS = frozenset({"text", "thought", "functionCall", "functionResponse"})


def chat_turn(model: str, body: dict[str, Any]) -> Turn:
    """A chat request (the Gemini source's chat body): turns of user and model parts, the
    last one the user's; an optional system instruction; tools as function declarations
    with a JSON Schema each; a generationConfig of maxOutputTokens, an optional temperature
    and thinkingConfig.includeThoughts, no response schema."""
    if set(body) - {"contents", "systemInstruction", "tools", "generationConfig"}:
        raise _bad("a chat request has contents, systemInstruction, tools, generationConfig.")
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise _bad("contents must be a non-empty list of turns.")
    for turn in contents:
        _chat_content(turn)
    if contents[-1]["role"] != "user":
        raise _bad("the last of contents must be the user's turn.")
    system = body.get("systemInstruction")
    system_text = _first_text(system) if isinstance(system, dict) else ""
    if system is not None and system_text is None:
        raise _bad("systemInstruction.parts[0].text must be a string.")
    config = body.get("generationConfig")
    if not isinstance(config, dict) or set(config) - {
        "maxOutputTokens",
        "temperature",
        "thinkingConfig",
    }:
        raise _bad("a chat request's generationConfig: maxOutputTokens, temperature, thinking.")
    max_tokens = config.get("maxOutputTokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens <= 0:
        raise _bad("generationConfig.maxOutputTokens must be a positive integer.")
    if config.get("thinkingConfig") != {"includeThoughts": True}:
        raise _bad("generationConfig.thinkingConfig must ask for the thoughts (includeThoughts).")
    temperature = config.get("temperature", 1)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise _bad("generationConfig.temperature must be a number.")
    user = contents[-1]["parts"]
    text = next((part["text"] for part in user if isinstance(part.get("text"), str)), "")
    return Turn(model, system_text or "", text, None, max_tokens, tools=_tool_names(body))


def _chat_content(turn: Any) -> None:
    if not isinstance(turn, dict) or turn.get("role") not in ("user", "model"):
        raise _bad("each of contents is a turn whose role is 'user' or 'model'.")
    parts = turn.get("parts")
    if not isinstance(parts, list) or not parts:
        raise _bad("each turn has a non-empty list of parts.")
    for part in parts:
        if not isinstance(part, dict) or len(set(part) & _CHAT_PART_KEYS - {"thought"}) != 1:
            raise _bad("a part holds one of text, functionCall, functionResponse.")
        if set(part) - _CHAT_PART_KEYS - {"thoughtSignature"}:
            raise _bad("a part of a chat request holds nothing else.")


def _tool_names(body: dict[str, Any]) -> tuple[str, ...]:
    """The declared functions' names (each with a description and a JSON Schema)."""
    tools = body.get("tools", [])
    if not isinstance(tools, list):
        raise _bad("tools must be a list.")
    names: list[str] = []
    for tool in tools:
        declarations = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        if not isinstance(declarations, list):
            raise _bad("each tool holds functionDeclarations.")
        for declaration in declarations:
            if (
                not isinstance(declaration, dict)
                or not isinstance(declaration.get("name"), str)
                or not isinstance(declaration.get("parametersJsonSchema"), dict)
            ):
                raise _bad("a function declaration has a name and its parametersJsonSchema.")
            names.append(declaration["name"])
    return tuple(names)
