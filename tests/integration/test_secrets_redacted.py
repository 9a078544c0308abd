"""Credentials in an LLM endpoint's URL are written nowhere (issue 22, item 9).

A user configures every role with ``openai:<model>@http://alice:<password>@127.0.0.1:<port>/v1``
(and an API key in ``RAGTRAIL_LLM_API_KEY``), then ingests, evaluates retrieval (the HTML report
with its backends table, ``metrics_history.models``), evaluates citations (answers from the
endpoint, the stored run, citations.json, the LLM cache and usage rows) and lists the runs, as
separate ``ragtrail`` processes that log everything at DEBUG. The endpoint is a local
OpenAI-compatible server answering with the scripted test double (``tests/scripted_llm.py``; not a
model) and only to the right basic-auth credentials, so the real password must reach it. Then:
wrong credentials, a misspelt spec and an unreachable database. Afterwards the whole
RAGTRAIL_HOME (SQLite database, artifact store, reports) and every command's output and logs
are searched for the password and the key: neither may appear anywhere.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.paths import sample_corpus_dir
from tests.scripted_llm import MODEL_ID, backend

PASSWORD = "Hunter2-s3cr3t-pw"
API_KEY = "sk-apikey-0xDEADBEEF"
WRONG = "Wrong-pw-0xBADCAFE"
SECRETS = (PASSWORD, API_KEY, WRONG)
# Logs of every logger at DEBUG on stderr (httpx logs each request's URL at INFO).
CLI = [
    sys.executable,
    "-c",
    "import logging, sys; logging.basicConfig(level=logging.DEBUG, stream=sys.stderr); "
    "from ragtrail.cli import app; app(prog_name='ragtrail')",
]


class FakeOpenAI:
    """``/v1/chat/completions`` on 127.0.0.1 answered by the scripted double, for requests that
    carry ``alice``'s basic-auth credentials; 401 otherwise."""

    def __init__(self) -> None:
        self.double = backend()
        self.lock = threading.Lock()
        self.authorised = 0
        self.refused = 0
        expected = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.headers.get("Authorization") != f"Basic {expected}":
                    with server.lock:
                        server.refused += 1
                    self._send(401, {"error": {"message": "invalid credentials"}})
                    return
                request = GenerationRequest(
                    messages=tuple(body["messages"]),
                    max_new_tokens=body.get("max_tokens", 256),
                    temperature=body.get("temperature", 0.0),
                    seed=body.get("seed"),
                )
                with server.lock:
                    server.authorised += 1
                    (result,) = server.double.generate([request])
                choice = {"message": {"content": result.text}, "finish_reason": "stop"}
                self._send(200, {"choices": [choice], "usage": {"prompt_tokens": 7}})

            def _send(self, status: int, data: dict[str, Any]) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]

    def spec(self, password: str = PASSWORD, model: str = MODEL_ID) -> str:
        return f"openai:{model}@http://alice:{password}@127.0.0.1:{self.port}/v1"


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    thread = threading.Thread(target=fake.httpd.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.httpd.shutdown()
    fake.httpd.server_close()


def test_no_credential_of_an_endpoint_url_is_written_anywhere(
    endpoint: FakeOpenAI, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RAGTRAIL_") or k == "RAGTRAIL_SHARED_DIR"
    }
    env = {
        **base,
        "RAGTRAIL_HOME": str(home),
        "RAGTRAIL_GENERATION__LLM": endpoint.spec(),
        "RAGTRAIL_MODELS__JUDGE": endpoint.spec(model="judge-model"),
        "RAGTRAIL_LLM_API_KEY": API_KEY,
        "RAGTRAIL_CITATIONS__BOOTSTRAP_SAMPLES": "100",
    }
    outputs: list[str] = []

    def run(*args: str, expect: int = 0, **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*CLI, *args],
            env={**env, **extra},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        outputs.extend((done.stdout, done.stderr))
        assert done.returncode == expect, done.stderr[-3000:]
        return done

    run("ingest", str(sample_corpus_dir()), "--corpus", "hb", "--json")
    retrieval = json.loads(run("eval", "retrieval", "--corpus", "hb", "--json").stdout)
    assert retrieval["report"] is not None  # the HTML report with its backends table
    cited = run(
        "eval", "citations", "--corpus", "hb", "--items", "3", "--scenario-items", "2",
        "--run-id", "cit-1", "--json",
    )  # fmt: skip
    summary = json.loads(cited.stdout)
    assert endpoint.authorised > 0  # the real credentials reached the endpoint
    assert summary["answerer"] == MODEL_ID and summary["mixture"]["failed"] == 0
    assert f"HTTP Request: POST http://127.0.0.1:{endpoint.port}/v1/chat" in cited.stderr
    shown = run("eval", "citations", "--corpus", "hb", "--items", "2", "--scenario", "none")
    assert "Citations of" in shown.stdout
    runs = json.loads(run("runs", "list", "--corpus", "hb", "--json").stdout)
    assert {r["run_id"] for r in runs} >= {"cit-1"}

    # wrong credentials (another model name: nothing replays from the cache): the server's 401
    # fails every answer, so the evaluation fails (exit code 3) with its reason stored, redacted
    refused = run(
        "eval", "citations", "--corpus", "hb", "--items", "2", "--scenario", "none",
        "--run-id", "cit-wrong", "--json",
        expect=3, RAGTRAIL_GENERATION__LLM=endpoint.spec(WRONG, model="uncached"),
    )  # fmt: skip
    assert endpoint.refused > 0 and "cit-wrong" in refused.stderr
    # a misspelt spec and an unreachable database: one line each, no password
    bad_spec = run(
        "runs", "list", expect=2, RAGTRAIL_MODELS__CRITIC=endpoint.spec().replace("openai", "opena")
    )
    assert "RAGTRAIL_MODELS__CRITIC" in bad_spec.stderr and "***@127.0.0.1" in bad_spec.stderr
    unreachable = f"postgresql+psycopg://alice:{PASSWORD}@127.0.0.1:9/ragtrail?connect_timeout=2"
    run("runs", "list", expect=1, RAGTRAIL_DATABASE_URL=unreachable)
    run("--debug", "runs", "list", expect=1, RAGTRAIL_DATABASE_URL=unreachable)

    stored = {str(p.relative_to(home)): content(p) for p in home.rglob("*") if p.is_file()}
    assert any(name.endswith(".html") for name in stored) and "ragtrail.db" in stored
    assert any(name.endswith("citations.json") for name in stored)
    assert any(name.endswith(".parquet") for name in stored)
    assert any(b"***@127.0.0.1" in data for data in stored.values())  # recorded, redacted
    for secret in SECRETS:
        leaks = [name for name, data in stored.items() if secret.encode() in data]
        assert not leaks, f"{secret} written to {leaks}"
        assert not [o for o in outputs if secret in o], f"{secret} in a command's output or logs"


def content(path: Path) -> bytes:
    """A file's bytes, and for a Parquet file (compressed pages) its rows as JSON as well."""
    raw = path.read_bytes()
    if path.suffix != ".parquet":
        return raw
    return raw + pd.read_parquet(path).to_json(orient="records").encode()
