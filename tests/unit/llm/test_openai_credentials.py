"""An OpenAI-compatible endpoint with credentials in its URL: they reach the server (HTTP basic
auth, as before), and neither the requested URL, the httpx log lines, the errors nor the client's
warnings show them."""

from __future__ import annotations

import base64
import logging

import httpx
import pytest
from pydantic import BaseModel

from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.backends.openai_compat import OpenAICompatBackend
from ragtrail.llm.client import LLMClient
from ragtrail.llm.prompts import Prompt

SECRET = "Pa55w0rd-xyzzy"
BASE_URL = f"http://alice:{SECRET}@llm.example:8000/v1"
REQUEST = GenerationRequest(messages=({"role": "user", "content": "hi"},))


def reply(content: str) -> httpx.Response:
    return httpx.Response(
        200, json={"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}
    )


def test_credentials_travel_as_basic_auth_never_in_the_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return reply("fine")

    backend = OpenAICompatBackend(
        "m", BASE_URL, api_key="ignored-by-basic", transport=httpx.MockTransport(handler)
    )
    with caplog.at_level(logging.DEBUG):
        (result,) = backend.generate([REQUEST])
    assert result.text == "fine"
    (request,) = seen
    assert str(request.url) == "http://llm.example:8000/v1/chat/completions"
    expected = base64.b64encode(f"alice:{SECRET}".encode()).decode()
    assert request.headers["authorization"] == f"Basic {expected}"
    assert SECRET not in caplog.text and SECRET not in backend.base_url


def test_percent_encoded_credentials_are_decoded_for_the_server() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        return reply("fine")

    url = "http://alice:p%40ss%3Aword@llm.example/v1"
    OpenAICompatBackend("m", url, transport=httpx.MockTransport(handler)).generate([REQUEST])
    assert seen == [f"Basic {base64.b64encode(b'alice:p@ss:word').decode()}"]


def test_an_endpoint_without_credentials_keeps_the_bearer_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return reply("fine")

    backend = OpenAICompatBackend(
        "m", "http://llm.example/v1/", api_key="k", transport=httpx.MockTransport(handler)
    )
    backend.generate([REQUEST])
    assert seen[0].headers["authorization"] == "Bearer k"
    assert backend.base_url == "http://llm.example/v1"


def test_errors_that_quote_the_url_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    def echo(request: httpx.Request) -> httpx.Response:  # a proxy that echoes what it was given
        return httpx.Response(502, text=f"upstream {BASE_URL} unreachable")

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot connect to {BASE_URL}")

    for handler in (echo, refuse):
        backend = OpenAICompatBackend(
            "m",
            BASE_URL,
            max_retries=1,
            transport=httpx.MockTransport(handler),
            sleep=lambda s: None,
        )
        with caplog.at_level(logging.DEBUG):
            (result,) = backend.generate([REQUEST])
        assert result.error is not None and "http://***@llm.example:8000/v1" in result.error
        assert SECRET not in result.error
    assert "retrying after" in caplog.text and SECRET not in caplog.text


class RaisingBackend:
    name = "raising"
    model_id = "m"

    def generate(self, requests: object) -> list[object]:
        raise RuntimeError(f"lost {BASE_URL}")


class In(BaseModel):
    text: str


class Out(BaseModel):
    answer: str


def test_a_raising_backend_is_reported_redacted(caplog: pytest.LogCaptureFixture) -> None:
    prompt = Prompt(name="t", version="1", instruction="Answer.", input_model=In, output_model=Out)
    client = LLMClient(RaisingBackend(), max_attempts=1)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        (outcome,) = client.run(prompt, [In(text="q")], stage="t")
    assert not outcome.ok and "RuntimeError: lost http://***@llm.example" in (outcome.error or "")
    assert SECRET not in (outcome.error or "") and SECRET not in caplog.text
