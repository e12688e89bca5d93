"""A chat binding (docs/protocol.md#chat-binding): built from a model request, and checked.

A chat binding is the model request itself (``model``, ``system``, ``turns``, ``tools``,
``settings``) under ``kind: "chat"``, its ``case_id`` and the digest of the request. The
producer checks one in full before it serves it (``check_chat_binding``): valid against
the binding's JSON Schema (``shared.chat_binding_schema``, by ``jsonschema``), its
``request_sha256`` the digest of its request, its case id the request's and of the rule,
no two tools of one name, the last turn the user's; anything else is
``request_binding_mismatch``. The binding reaching here is already bounded (its bytes and
its depth are checked first: ``shared.requests``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from replywire.shared.chat_binding_schema import SCHEMA_TEXT
from replywire.shared.digest import digest
from replywire.shared.errors import RequestRefused
from replywire.shared.kinds import KIND_KEY, ReplyKind
from replywire.shared.reasons import Reason

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

CHAT_PREFIX: Final = "chat-"
#: The model a chat request names when its caller names none (the Gemini source's default).
DEFAULT_CHAT_MODEL: Final = "gemini-3.1-flash-lite"
#: A development case id: ``chat-`` and the first 16 hex characters of ``request_sha256``.
_DEVELOPMENT_CASE: Final = re.compile(r"chat-[0-9a-f]{16}")


@cache
def _validator() -> Draft202012Validator:
    """The schema's validator, made when a binding is first checked: ``jsonschema`` costs a
    tenth of a second to import, which a process that checks no chat binding never pays."""
    from jsonschema import Draft202012Validator  # noqa: PLC0415

    return Draft202012Validator(json.loads(SCHEMA_TEXT))


def chat_binding(request: dict[str, Any], case_id: str | None = None) -> dict[str, Any]:
    """The chat binding of ``request``, under ``case_id`` (a recorded case's name), or under
    ``chat-`` and 16 hex characters of its digest."""
    request_sha256 = digest(request)
    return {
        KIND_KEY: ReplyKind.CHAT.value,
        "case_id": case_id or CHAT_PREFIX + request_sha256[:16],
        "request_sha256": request_sha256,
        "request": request,
    }


def chat_request(
    prompt: str,
    tools: list[Any],
    *,
    system: str = "",
    model: str = DEFAULT_CHAT_MODEL,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A one-turn chat request: the user's ``prompt``, the declared ``tools``."""
    return {
        "model": model,
        "system": system,
        "turns": [{"role": "user", "parts": [{"text": prompt}]}],
        "tools": tools,
        "settings": settings or {},
    }


def is_chat_case(case_id: object) -> bool:
    return isinstance(case_id, str) and case_id.startswith(CHAT_PREFIX)


def chat_binding_problem(
    binding: object, case_id: str, *, recorded: bool = False, schema: bool = True
) -> str | None:
    """Why ``binding`` is not a chat binding for ``case_id``, or None: the schema first, then
    what it cannot say (the digest, the case id, the tools' names, the last turn). A
    ``recorded`` case keeps its own name; any other is ``chat-`` + 16 hex of the digest.
    ``schema=False`` skips the schema (a pinned file's bindings, which the tests check
    against it): a binding of another shape then raises ``KeyError`` or ``TypeError``."""
    if not isinstance(binding, Mapping):
        return "not an object"
    error = next(iter(_validator().iter_errors(binding)), None) if schema else None
    if error is not None:
        where = "/".join(str(step) for step in error.absolute_path) or "the binding"
        return f"{where}: not as the chat binding's schema says ({error.validator})"
    request = binding["request"]
    if binding["request_sha256"] != digest(request):
        return "request_sha256 is not the digest of request"
    if binding["case_id"] != case_id:
        return "case_id is not the request's"
    if not recorded and (
        not _DEVELOPMENT_CASE.fullmatch(case_id)
        or case_id != CHAT_PREFIX + binding["request_sha256"][:16]
    ):
        return "case_id is not chat- and 16 hex characters of request_sha256"
    names = [tool["name"] for tool in request["tools"]]
    if len(set(names)) != len(names):
        return "two tools have one name"
    if request["turns"][-1]["role"] != "user":
        return "the last turn is not the user's"
    return None


def check_chat_binding(
    binding: Mapping[str, Any], case_id: str, *, recorded: bool = False
) -> dict[str, Any]:
    """The binding, checked (``chat_binding_problem``): ``request_binding_mismatch`` when it
    is not a chat binding for ``case_id``."""
    problem = chat_binding_problem(binding, case_id, recorded=recorded)
    if problem is not None:
        raise RequestRefused(Reason.REQUEST_BINDING_MISMATCH, f"not a chat binding: {problem}")
    return dict(binding)


def declared_tools(binding: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The binding's declared tools: each name and its parameters' schema."""
    return {tool["name"]: tool["parameters"] for tool in binding["request"]["tools"]}
