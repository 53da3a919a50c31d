"""The people's API as an OpenAPI 3.1 document, derived from the operation table.

``recursa daemon openapi`` prints it: the Agents View and outside tools build
on it. Every person row (:mod:`recursa.protocol.person_ops`) is one operation,
its ``operationId`` the row's name; path parameters, query parameters
(``GET``, ``DELETE``) and the JSON body (other methods) are the request
value's fields, and the reply's schema is its type's. Schemas come from
pydantic's ``TypeAdapter(...).json_schema``, shared under
``components/schemas``. Every operation needs the client token (HTTP bearer)
and may answer an error body.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import TypeAdapter

from recursa import __version__
from recursa.protocol.events import PROTOCOL_VERSION
from recursa.protocol.operations import Operation, operations, request_fields
from recursa.protocol.wire import API_PREFIX, ERROR_STATUS, HEADER_CLIENT, HEADER_COMMAND

_REF = "#/components/schemas/{model}"
_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["kind", "message"],
            "properties": {
                "kind": {"enum": sorted(ERROR_STATUS)},
                "message": {"type": "string", "description": "One line a person can act on."},
            },
        }
    },
}


def openapi() -> dict[str, Any]:
    """The document: every person row, in the table's order."""
    schemas: dict[str, Any] = {"Error": _ERROR}
    paths: dict[str, dict[str, Any]] = {}
    for op in operations():
        if op.audience != "person":
            continue
        path = API_PREFIX + op.route.replace(":path}", "}")
        paths.setdefault(path, {})[op.method.lower()] = _operation(op, schemas)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "recursa daemon",
            "version": __version__,
            "description": (
                f"The people's API of the recursa daemon (wire protocol {PROTOCOL_VERSION}), "
                "HTTP/1.1 over the daemon's unix socket."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"token": []}],
    }


def _operation(op: Operation[Any, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {"operationId": op.name, "summary": op.summary}
    parameters: list[dict[str, Any]] = []
    body: dict[str, Any] = {}
    required: list[str] = []
    if op.request is not None:
        defaults = _defaults(op.request)
        for name, kind in request_fields(op.request).items():
            schema = _schema(kind, schemas)
            if name in op.path_fields:
                parameters.append({"name": name, "in": "path", "required": True, "schema": schema})
            elif op.in_query:
                parameters.append(
                    {
                        "name": name,
                        "in": "query",
                        "required": name not in defaults,
                        "schema": schema,
                    }
                )
            else:
                body[name] = schema
                if name not in defaults:
                    required.append(name)
    if op.command:
        for header in (HEADER_CLIENT, HEADER_COMMAND):
            parameters.append({"name": header, "in": "header", "schema": {"type": "string"}})
    if parameters:
        found["parameters"] = parameters
    if op.request is not None and not op.in_query:
        shape: dict[str, Any] = {"type": "object", "properties": body}
        if required:
            shape["required"] = required
        found["requestBody"] = {
            "required": bool(required),
            "content": {"application/json": {"schema": shape}},
        }
    if op.stream:
        reply = {
            "description": "NDJSON: one event record per line, and control lines",
            "content": {"application/x-ndjson": {"schema": {"type": "object"}}},
        }
    else:
        reply = {
            "description": op.summary,
            "content": {"application/json": {"schema": _schema(op.reply, schemas)}},
        }
    error = {"$ref": "#/components/schemas/Error"}
    found["responses"] = {
        str(op.status): reply,
        "default": {"description": "An error", "content": {"application/json": {"schema": error}}},
    }
    return found


def _schema(kind: Any, schemas: dict[str, Any]) -> dict[str, Any]:
    schema = TypeAdapter(kind).json_schema(ref_template=_REF)
    schemas.update(schema.pop("$defs", {}))
    return schema


def _defaults(cls: type[Any]) -> set[str]:
    return {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }


__all__ = ["openapi"]
