"""The binding a consumer command's flags name: a pinned case's (``--case``), a new
question's (``--question`` / ``--context``), a text's (``--kind text --text``), a chat turn's
(``--kind chat --prompt``, ``--tools``), or a binding file's (``--binding``, to test
refusals). Each refuses the flags of the others with a usage error
(``ConfigurationError``, exit 2) that names the flag to add or drop."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from replywire.runtime.recording_file import (
    load_chat_recording_or_explain,
    load_recording_or_explain,
    load_text_recording_or_explain,
)
from replywire.shared.chats import (
    DEFAULT_CHAT_MODEL,
    chat_binding,
    chat_binding_problem,
    chat_request,
)
from replywire.shared.digest import bounded_json, canonical_json, within_depth
from replywire.shared.errors import ConfigurationError, RequestRefused
from replywire.shared.kinds import ReplyKind, kind_of
from replywire.shared.pinned_cases import PinnedCases
from replywire.shared.questions import build_question_binding, parse_passages
from replywire.shared.requests import (
    MAX_BINDING_BYTES,
    MAX_BINDING_DEPTH,
)
from replywire.shared.texts import MAX_ECHO_CHARS, build_text_binding


def load_binding(args: argparse.Namespace) -> tuple[str, Any]:
    """The case id and binding to send: the recording's, a new question's, or (to test
    refusals) a file's."""
    recording = load_recording_or_explain(args.recording)
    chat, text = chat_binding_from(args), text_binding(args)  # each refuses the other's flags
    asked = chat if chat is not None else text
    if asked is not None:
        return asked
    if (args.question is None) != (args.context is None):
        raise ConfigurationError("--question and --context go together")
    if args.question is not None:
        if args.case is not None or args.binding is not None:
            raise ConfigurationError("--question binds its own case: drop --case and --binding")
        try:
            passages = parse_passages(args.context.read_text(encoding="utf-8"))
            binding = build_question_binding(args.question, passages)
        except OSError as error:
            raise ConfigurationError(f"cannot read the context {args.context}: {error}") from error
        except RequestRefused as error:
            raise ConfigurationError(f"--question / --context: {error.detail}") from error
        return binding["case_id"], binding
    if args.case is None:
        raise ConfigurationError("--case or --question is required")
    if args.binding is not None:
        return args.case, binding_file(args)
    return args.case, recording.case(args.case).binding


def binding_file(args: argparse.Namespace) -> Any:
    """``--binding FILE``: its JSON, bounded, of the kind ``--kind`` asks for."""
    try:
        text = args.binding.read_text(encoding="utf-8")
        binding = bounded_json(text, max_bytes=MAX_BINDING_BYTES, max_depth=MAX_BINDING_DEPTH)
    except (OSError, ValueError) as error:
        raise ConfigurationError(f"cannot read the binding {args.binding}: {error}") from error
    named = kind_of(binding) if isinstance(binding, dict) else ReplyKind.GROUNDED
    asked = getattr(args, "kind", None)  # not given: the file's own kind
    if asked is not None and named.value != asked:
        raise ConfigurationError(f"the binding asks for a {named} reply: --kind {named}")
    return binding


def recorded(
    args: argparse.Namespace,
    kind: ReplyKind,
    load: Callable[[], PinnedCases],
    asking: str,
    what: str,
) -> tuple[str, Any] | None:
    """``--kind K --case C``: the binding of C in the recording ``load`` reads, ``what``
    it records (None with ``--binding``, whose file the caller reads); ``asking`` is the
    flag that asks for a reply of that kind without a case."""
    if args.case is None:
        raise ConfigurationError(f"--kind {kind} needs {asking} or --case (a {what})")
    if args.binding is not None:
        return None
    try:
        return args.case, load().case(args.case).binding
    except RequestRefused as error:
        raise ConfigurationError(f"--case {args.case}: no {what} ({error.code})") from error


def text_binding(args: argparse.Namespace) -> tuple[str, Any] | None:
    """``--kind text --text T``: the development source's text binding for T (None when
    the flags ask for no text reply; a binding file of either kind is read by the caller)."""
    kind = getattr(args, "kind", None) or ReplyKind.GROUNDED.value
    text = getattr(args, "text", None)
    if kind != ReplyKind.TEXT.value:
        if text is not None:
            raise ConfigurationError("--text asks for a text reply: add --kind text")
        return None
    if args.question is not None:
        raise ConfigurationError("--question asks for a grounded reply: drop --kind text")
    if text is None:
        return recorded(
            args, ReplyKind.TEXT, load_text_recording_or_explain, "--text", "recorded text"
        )
    if args.case is not None or args.binding is not None:
        raise ConfigurationError("--text binds its own case: drop --case and --binding")
    if len(text) > MAX_ECHO_CHARS:
        raise ConfigurationError(f"--text is over {MAX_ECHO_CHARS:,} code points")
    try:
        binding = build_text_binding(text)
    except ValueError as error:  # a lone surrogate (bytes that are not UTF-8 in argv)
        raise ConfigurationError(f"--text is not text: {error}") from error
    return binding["case_id"], binding


#: The flags that describe a chat request (``--kind chat --prompt``).
CHAT_FLAGS: Final = ("prompt", "tools", "system", "model")


def chat_binding_from(args: argparse.Namespace) -> tuple[str, Any] | None:
    """``--kind chat --prompt P [--tools FILE] [--system S] [--model M]``: the chat binding
    of that one-turn request, checked as a producer checks one (a usage error if it is not
    one); ``--kind chat --case C``: the recorded chat turn C's binding. None when the flags
    ask for no chat reply (a binding file of either kind is read by the caller)."""
    given = [name for name in CHAT_FLAGS if getattr(args, name, None) is not None]
    if getattr(args, "kind", None) != ReplyKind.CHAT.value:
        if given:
            raise ConfigurationError(f"--{given[0]} asks for a chat reply: add --kind chat")
        return None
    if args.question is not None:
        raise ConfigurationError("--question asks for a grounded reply: drop --kind chat")
    if args.prompt is None:
        if given:
            raise ConfigurationError(f"--{given[0]} goes with --prompt")
        return recorded(
            args, ReplyKind.CHAT, load_chat_recording_or_explain, "--prompt", "recorded chat turn"
        )
    if args.case is not None or args.binding is not None:
        raise ConfigurationError("--prompt binds its own case: drop --case and --binding")
    request = chat_request(
        args.prompt,
        [] if args.tools is None else tools_file(args.tools),
        system=args.system or "",
        model=DEFAULT_CHAT_MODEL if args.model is None else args.model,
    )
    try:
        binding = chat_binding(request)
        size = len(canonical_json(binding))
    except ValueError as error:  # a lone surrogate (bytes that are not UTF-8 in argv)
        raise ConfigurationError(f"--prompt / --system / --model: not text: {error}") from error
    if size > MAX_BINDING_BYTES or not within_depth(binding, MAX_BINDING_DEPTH):
        raise ConfigurationError(
            f"the chat binding is over {MAX_BINDING_BYTES // 1024} KiB or "
            f"{MAX_BINDING_DEPTH} levels deep"
        )
    problem = chat_binding_problem(binding, binding["case_id"])
    if problem is not None:
        raise ConfigurationError(f"--prompt / --tools: {problem}")
    return binding["case_id"], binding


def tools_file(path: Path) -> Any:
    """``--tools FILE``: a JSON array of tools (``{name, description, parameters}``),
    bounded as a binding file is (the chat binding's checks judge each tool)."""
    try:
        text = path.read_text(encoding="utf-8")
        tools = bounded_json(text, max_bytes=MAX_BINDING_BYTES, max_depth=MAX_BINDING_DEPTH)
    except (OSError, ValueError) as error:
        raise ConfigurationError(f"cannot read the tools {path}: {error}") from error
    if not isinstance(tools, list):
        raise ConfigurationError(f"--tools {path}: a JSON array of tools")
    return tools
