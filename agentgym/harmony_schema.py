"""Tool schemas as the TypeScript ``namespace functions`` of GPT-OSS's developer message.

A line-for-line port of openai-harmony's ``json_schema_to_typescript`` and
``template_tools_section`` (``src/encoding.rs``, v0.0.8), so that a developer message rendered
by agentgym is token-for-token the one openai-harmony renders for the same tools (the suite
checks it against openai-harmony itself). Its quirks are kept on purpose, because GPT-OSS was
trained on this rendering: a no-argument tool declared ``{"type": "object", "properties": {}}``
renders as ``(_: {\\n}) => any``; nested objects close with the parent's indentation plus four
spaces (``    }[]``); ``"type": "null"`` renders as ``any``; a multi-line *tool* description
becomes one ``//`` comment line per line, while a multi-line *property* description is inserted
as is (as openai-harmony does).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["render_tool_signatures", "schema_to_typescript"]


def _lines(text: str) -> list[str]:
    """Rust's ``str::lines``: split at ``\n`` or ``\r\n`` (a bare ``\r`` stays), no final empty line."""
    parts = text.split("\n")
    last = parts.pop()  # not followed by "\n": keeps a trailing "\r"
    lines = [p[:-1] if p.endswith("\r") else p for p in parts]
    return [*lines, last] if last else lines


def _json(value: Any) -> str:
    """serde_json's compact ``Display`` of a value."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _is_enum(schema: Any) -> bool:
    return isinstance(schema, dict) and isinstance(schema.get("enum"), list) and bool(schema["enum"])


def _get(schema: Any, key: str) -> Any:
    return schema.get(key) if isinstance(schema, dict) else None


def _str(schema: Any, key: str) -> str | None:
    v = _get(schema, key)
    return v if isinstance(v, str) else None


def _nullable(schema: Any, type_str: str) -> str:
    if _get(schema, "nullable") is True and "null" not in type_str:
        return f"{type_str} | null"
    return type_str


def _variant_default(variant: Any) -> list[str]:
    """A top-level oneOf variant's trailing ``default: ...`` (quoted plain string, else JSON)."""
    if not isinstance(variant, dict) or "default" not in variant:
        return []
    d = variant["default"]
    return [f'default: "{d}"' if isinstance(d, str) and not _is_enum(variant) else f"default: {_json(d)}"]


def _property_default(prop: Any) -> str | None:
    """A property's ``default: ...`` text: quoted for plain strings, bare for enum strings, else JSON."""
    if not isinstance(prop, dict) or "default" not in prop:
        return None
    d = prop["default"]
    if isinstance(d, str):
        return f"default: {d}" if _is_enum(prop) else f'default: "{d}"'
    return f"default: {_json(d)}"


def _one_of(variants: list[Any], indent: str) -> str:
    out = ""
    for variant in variants:
        out += f"\n{indent} | " + _nullable(variant, schema_to_typescript(variant, indent + "   "))
        trailing = ([d] if (d := _str(variant, "description")) is not None else []) + _variant_default(variant)
        if trailing:
            out += " // " + " ".join(trailing)
    return out


def _property_one_of(key: str, prop: dict[str, Any], variants: list[Any], optional: str, indent: str) -> str:
    desc = _str(prop, "description")
    skip_desc = desc is not None and bool(variants) and _str(variants[0], "description") == desc
    out, desc_above = "", False
    if desc is not None and not skip_desc:
        out += f"{indent}// {desc}\n"
        desc_above = True
    if (d := _property_default(prop)) is not None:
        out += f"{indent}// {d}\n"
    out += f"{indent}{key}{optional}:\n"
    for i, variant in enumerate(variants):
        out += f"{indent} | " + _nullable(variant, schema_to_typescript(variant, indent + "   "))
        trailing: list[str] = []
        vdesc = _str(variant, "description")
        if not (i == 0 and desc_above) and vdesc is not None and vdesc != desc:
            trailing.append(vdesc)
        if (vd := _property_default(variant)) is not None:  # here enum strings go unquoted
            trailing.append(vd)
        if trailing:
            out += " // " + " ".join(trailing)
        out += "\n"
    return out + f"{indent},\n"


def _object(schema: dict[str, Any], indent: str) -> str:
    out = f"{indent}// {d}\n" if (d := _str(schema, "description")) is not None else ""
    out += "{\n"
    props = schema.get("properties")
    if isinstance(props, dict):
        req = schema.get("required")
        required = {r for r in req if isinstance(r, str)} if isinstance(req, list) else set()
        for key, prop in props.items():
            optional = "" if key in required else "?"
            if (title := _str(prop, "title")) is not None:
                out += f"{indent}// {title}\n{indent}//\n"
            if _get(prop, "oneOf") is None and (desc := _str(prop, "description")) is not None:
                out += f"{indent}// {desc}\n"
            examples = _get(prop, "examples")
            if isinstance(examples, list) and examples:
                out += f"{indent}// Examples:\n"
                out += "".join(f'{indent}// - "{ex}"\n' for ex in examples if isinstance(ex, str))
            variants = _get(prop, "oneOf")
            if isinstance(variants, list):
                out += _property_one_of(key, prop, variants, optional, indent)
                continue
            out += f"{indent}{key}{optional}: " + _nullable(prop, schema_to_typescript(prop, indent + "    ")) + ","
            if _get(prop, "oneOf") is None and (d := _property_default(prop)) is not None:
                out += f" // {d}"
            out += "\n"
    return out + f"{indent}}}"


def schema_to_typescript(schema: Any, indent: str = "") -> str:
    """A JSON schema as the TypeScript type openai-harmony writes for it."""
    variants = _get(schema, "oneOf")
    if isinstance(variants, list):
        return _one_of(variants, indent)
    ty = _get(schema, "type")
    if isinstance(ty, list):
        names = ["number" if t == "integer" else t for t in ty if isinstance(t, str)]
        if names:
            return " | ".join(names)
    if not isinstance(ty, str):
        return "any"
    if ty == "object":
        return _object(schema, indent)
    if ty == "string":
        enum = _get(schema, "enum")
        values = [f'"{v}"' for v in enum if isinstance(v, str)] if isinstance(enum, list) else []
        return " | ".join(values) if values else "string"
    if ty == "array":
        items = _get(schema, "items")
        return f"{schema_to_typescript(items, indent)}[]" if items is not None else "Array<any>"
    return {"number": "number", "integer": "number", "boolean": "boolean"}.get(ty, "any")


def render_tool_signatures(tools: Sequence[Any], namespace: str = "functions") -> str:
    """The ``# Tools`` section of the developer message, for objects with name/description/parameters
    (``parameters=None``: a tool without arguments, ``() => any``)."""
    body = [f"## {namespace}\n"]
    if tools:
        body.append(f"namespace {namespace} {{\n")
        for tool in tools:
            body += [f"// {line}" for line in _lines(tool.description)]
            if tool.parameters is None:
                body.append(f"type {tool.name} = () => any;\n")
            else:
                body.append(f"type {tool.name} = (_: {schema_to_typescript(tool.parameters)}) => any;\n")
        body.append(f"}} // namespace {namespace}")
    return "\n\n".join(["# Tools", "\n".join(body)])
