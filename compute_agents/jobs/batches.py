"""OpenAI's Batch API over the job queue: an uploaded JSONL of requests becomes one job per line, and a
finished batch has an output file (one line per answered request) and an error file (refused or
failed ones), each line naming its ``custom_id``. The format is OpenAI's, so its clients work as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from .store import Batch, Job

ENDPOINTS = ("/v1/chat/completions", "/v1/completions")
COMPLETION_WINDOWS = ("24h",)
MAX_LINES = 10_000
MAX_FILE_BYTES = 50 * 2**20
CUSTOM_ID_MAX = 512


class BatchInputError(ValueError):
    """A batch input file that cannot run as it is: the line and what is wrong with it."""

    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line


@dataclass(frozen=True)
class BatchLine:
    number: int
    custom_id: str
    body: Any  # the request body, admitted later like an interactive request's


def parse_batch_input(content: bytes, endpoint: str) -> list[BatchLine]:
    """The requests of an input file, or BatchInputError naming the first bad line."""
    if endpoint not in ENDPOINTS:
        raise BatchInputError(None, f"endpoint must be one of {', '.join(ENDPOINTS)}")
    lines: list[BatchLine] = []
    seen: set[str] = set()
    for number, raw in enumerate(content.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            item = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise BatchInputError(number, "not a JSON object") from None
        if not isinstance(item, dict):
            raise BatchInputError(number, "not a JSON object")
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not 0 < len(custom_id) <= CUSTOM_ID_MAX:
            raise BatchInputError(number, f"custom_id must be a string of 1..{CUSTOM_ID_MAX} characters")
        if custom_id in seen:
            raise BatchInputError(number, f"custom_id {custom_id!r} appears twice")
        seen.add(custom_id)
        if item.get("method") != "POST" or item.get("url") != endpoint:
            raise BatchInputError(number, f"each request must be POST {endpoint}, the batch's endpoint")
        if not isinstance(item.get("body"), dict):
            raise BatchInputError(number, "body must be a JSON object")
        if item["body"].get("stream") is True:
            raise BatchInputError(number, "a batch request cannot stream")
        lines.append(BatchLine(number, custom_id, item["body"]))
        if len(lines) > MAX_LINES:
            raise BatchInputError(number, f"a batch holds at most {MAX_LINES} requests")
    if not lines:
        raise BatchInputError(None, "the input file holds no request")
    return lines


def refused_line(custom_id: str, request_id: str, status: int, error: dict[str, Any]) -> dict[str, Any]:
    """The error-file line of a request refused at admission (it has an unbilled ``rejected`` record)."""
    return {
        "id": f"batch_req_{request_id}",
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": error},
        "error": {"code": error["error"]["code"], "message": error["error"]["message"]},
    }


def result_line(job: Job) -> dict[str, Any]:
    """A finished job's line of the output file (succeeded) or of the error file (failed)."""
    body = orjson.loads(job.result_body) if job.result_body else None
    error = None
    if job.state != "succeeded":
        found = body.get("error", {}) if isinstance(body, dict) else {}
        error = {"code": found.get("code") or "failed", "message": found.get("message") or "failed"}
    return {
        "id": f"batch_req_{job.id}",
        "custom_id": job.custom_id,
        "response": {"status_code": job.result_status, "request_id": job.result_request_id, "body": body},
        "error": error,
    }


def result_files(batch: Batch, jobs: list[Job]) -> tuple[bytes, bytes]:
    """(output file, error file) of a batch whose jobs have all finished, in input order."""
    output = [result_line(job) for job in jobs if job.state == "succeeded"]
    errors = [*batch.refused, *(result_line(job) for job in jobs if job.state != "succeeded")]
    return _jsonl(output), _jsonl(errors)


def batch_object(batch: Batch, jobs: list[Job]) -> dict[str, Any]:
    """The batch as OpenAI's API shows it."""
    finished = [job for job in jobs if job.finished]
    failed = len(batch.refused) + sum(1 for job in finished if job.state != "succeeded")
    done = batch.completed_ns is not None
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": None,
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": "completed" if done else "in_progress",
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "created_at": batch.created_ns // 10**9,
        "in_progress_at": batch.created_ns // 10**9,
        "completed_at": batch.completed_ns // 10**9 if done and batch.completed_ns else None,
        "request_counts": {
            "total": len(jobs) + len(batch.refused),
            "completed": len(finished) - (failed - len(batch.refused)),
            "failed": failed,
        },
        "metadata": batch.metadata,
    }


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)
