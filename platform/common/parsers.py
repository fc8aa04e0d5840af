"""The one reader of JSON request bodies: orjson, then the limits every body must keep.

Every REST body (DRF's only parser, `JsonParser`) and every view that reads a JSON body itself
(`read_json`) goes through `loads`, so one set of limits applies everywhere:

- size: at most `API_JSON_MAX_BYTES` bytes (default 1 MiB); more answers 413 `request_too_large`;
- nesting: at most `treemeter_records.limits.JSON_MAX_DEPTH` levels of arrays and objects;
- members: at most `JSON_MAX_MEMBERS` object members plus array items in the whole document;
- text: UTF-8 JSON (RFC 8259); anything else, or over the nesting or member limit, answers 400
  `malformed_json`.

orjson stops at its own depth limit (1024) with a decode error, so no input reaches a recursion limit;
the depth and member limits are checked afterwards, without recursion (`json_limit_problem`).

One kind of body is not a request but a file users keep, read by its own reader: a LiteLLM price file
(`catalog.model_prices_api`), decoded as exact decimals and larger than any request.
`JsonFileParser` hands such a view the body's bytes, at most `JSON_FILE_MAX_BYTES`; the view's reader
then owns its rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

import orjson
from django.conf import settings
from django.http import HttpRequest
from rest_framework.parsers import BaseParser

from treemeter_records.limits import json_limit_problem

from .errors import MalformedJson, RequestTooLarge


def max_body_bytes() -> int:
    return int(settings.API_JSON_MAX_BYTES)


def loads(raw: bytes | bytearray | memoryview | str) -> Any:
    """The decoded body, or MalformedJson / RequestTooLarge."""
    limit = max_body_bytes()
    if len(raw) > limit:
        raise RequestTooLarge(limit)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise MalformedJson(str(error)) from None
    problem = json_limit_problem(value)
    if problem is not None:
        raise MalformedJson(problem)
    return value


def declared_length(meta: Mapping[str, Any]) -> int:
    """The request's Content-Length, or 0 when it declares none (or nonsense)."""
    try:
        return max(0, int(meta.get("CONTENT_LENGTH") or 0))
    except ValueError:
        return 0


def read_json(request: HttpRequest) -> Any:
    """The JSON body of a plain Django view, under the same limits as every REST body."""
    limit = max_body_bytes()
    if declared_length(request.META) > limit:
        raise RequestTooLarge(limit)
    return loads(request.body)


class JsonParser(BaseParser):
    """DRF's parser for `application/json`: reads at most one byte past the size limit, then `loads`."""

    media_type = "application/json"

    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        limit = max_body_bytes()
        request = (parser_context or {}).get("request")
        if request is not None and declared_length(request.META) > limit:
            raise RequestTooLarge(limit)
        return loads(stream.read(limit + 1))


class JsonFileParser(BaseParser):
    """An `application/json` body that is a file for the view's own reader (see the module docstring):
    its bytes under `KEY`, at most `JSON_FILE_MAX_BYTES` (else 413 `request_too_large`)."""

    media_type = "application/json"
    KEY = "file"

    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> dict[str, bytes]:
        limit = int(settings.JSON_FILE_MAX_BYTES)
        request = (parser_context or {}).get("request")
        if request is not None and declared_length(request.META) > limit:
            raise RequestTooLarge(limit)
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise RequestTooLarge(limit)
        return {self.KEY: bytes(body)}
