"""The chat binding's JSON Schema as data: ``protos/schemas/chat-binding.schema.json``, the
contract's file, copied byte for byte (``tests/unit/test_chat_bindings.py`` keeps the two
equal), so that the pure core checks a binding against it without reading a file."""

from __future__ import annotations

from typing import Final

#: The text of ``protos/schemas/chat-binding.schema.json``.
SCHEMA_TEXT: Final = r"""{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://replywire.invalid/schemas/chat-binding.schema.json",
  "title": "replywire/1 chat binding",
  "description": "The value an OpenRequest's binding_json carries when it asks for a chat reply (docs/protocol.md#chat-binding; its kind is REPLY_KIND_CHAT): the model request itself. Its canonical JSON bytes (docs/protocol.md#canonical-json) are what a request sends and what binding_sha256 hashes. The schema states the shape; what it cannot say is stated there: case_id equals the request's, request_sha256 is the digest of request, no two tools share a name, and the last turn is the user's.",
  "type": "object",
  "additionalProperties": false,
  "required": ["kind", "case_id", "request_sha256", "request"],
  "properties": {
    "kind": {"const": "chat"},
    "case_id": {
      "description": "The case: a recorded chat case, or chat- and the first 16 characters of request_sha256; equal to OpenRequest.case_id.",
      "type": "string",
      "minLength": 6,
      "maxLength": 128,
      "pattern": "^chat-[\\x21-\\x7e]+$"
    },
    "request_sha256": {
      "description": "SHA-256 (lowercase hex) of the canonical JSON of request.",
      "type": "string",
      "pattern": "^[0-9a-f]{64}$"
    },
    "request": {
      "type": "object",
      "additionalProperties": false,
      "required": ["model", "system", "turns", "tools", "settings"],
      "properties": {
        "model": {"type": "string", "minLength": 1, "maxLength": 128},
        "system": {"description": "The system instruction; empty for none.", "type": "string"},
        "turns": {
          "type": "array",
          "minItems": 1,
          "maxItems": 64,
          "items": {"$ref": "#/$defs/turn"}
        },
        "tools": {
          "type": "array",
          "maxItems": 64,
          "items": {"$ref": "#/$defs/tool"}
        },
        "settings": {
          "type": "object",
          "additionalProperties": false,
          "properties": {
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
            "max_output_tokens": {"type": "integer", "minimum": 1, "maximum": 65536}
          }
        }
      }
    }
  },
  "$defs": {
    "turn": {
      "type": "object",
      "additionalProperties": false,
      "required": ["role", "parts"],
      "properties": {
        "role": {"enum": ["user", "model"]},
        "parts": {"type": "array", "minItems": 1, "maxItems": 64, "items": {"$ref": "#/$defs/part"}}
      }
    },
    "part": {
      "description": "Exactly one of text, thought, tool_call, tool_result; and optionally the signature a reply gave with it.",
      "type": "object",
      "minProperties": 1,
      "maxProperties": 2,
      "additionalProperties": false,
      "properties": {
        "text": {"type": "string"},
        "thought": {"type": "string"},
        "tool_call": {
          "type": "object",
          "additionalProperties": false,
          "required": ["id", "name", "arguments"],
          "properties": {
            "id": {"type": "string"},
            "name": {"$ref": "#/$defs/tool_name"},
            "arguments": {"type": "object"}
          }
        },
        "tool_result": {
          "type": "object",
          "additionalProperties": false,
          "required": ["id", "name", "result"],
          "properties": {
            "id": {"type": "string"},
            "name": {"$ref": "#/$defs/tool_name"},
            "result": {"type": "object"}
          }
        },
        "signature": {"type": "string", "minLength": 1}
      },
      "oneOf": [
        {"required": ["text"]},
        {"required": ["thought"]},
        {"required": ["tool_call"]},
        {"required": ["tool_result"]}
      ]
    },
    "tool_name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"},
    "tool": {
      "type": "object",
      "additionalProperties": false,
      "required": ["name", "description", "parameters"],
      "properties": {
        "name": {"$ref": "#/$defs/tool_name"},
        "description": {"type": "string"},
        "parameters": {
          "allOf": [{"$ref": "#/$defs/parameter"}],
          "required": ["type"],
          "properties": {"type": {"const": "object"}}
        }
      }
    },
    "parameter": {
      "description": "A JSON Schema (2020-12) written with these keywords only, at any depth (docs/protocol.md#chat-binding).",
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "type": {
          "anyOf": [
            {"$ref": "#/$defs/type_name"},
            {"type": "array", "minItems": 1, "uniqueItems": true, "items": {"$ref": "#/$defs/type_name"}}
          ]
        },
        "properties": {"type": "object", "additionalProperties": {"$ref": "#/$defs/parameter"}},
        "required": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
        "items": {"$ref": "#/$defs/parameter"},
        "enum": {"type": "array", "minItems": 1},
        "description": {"type": "string"},
        "title": {"type": "string"},
        "additionalProperties": {"type": "boolean"},
        "minimum": {"type": "number"},
        "maximum": {"type": "number"},
        "minLength": {"type": "integer", "minimum": 0},
        "maxLength": {"type": "integer", "minimum": 0},
        "minItems": {"type": "integer", "minimum": 0},
        "maxItems": {"type": "integer", "minimum": 0}
      }
    },
    "type_name": {"enum": ["object", "array", "string", "integer", "number", "boolean", "null"]}
  }
}
"""  # noqa: E501 (the file as it is)
