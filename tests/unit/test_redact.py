"""Credentials inside URLs: the redaction itself, and each place that records, stores or prints a
spec or URL (issue 22, item 9). The real value still reaches the backend; only what is written
is redacted, and a redacted spec never loads a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from ragtrail.config import ModelRole, load_settings
from ragtrail.config_checks import ConfigError, check_database_url
from ragtrail.evaluate.contract import Aggregate, EvaluationResult
from ragtrail.judges.contract import JudgeRole, JudgeSpec, VerdictType
from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.cache import CacheEntry, SqlLLMCache, cache_key
from ragtrail.llm.factory import load_llm_backend
from ragtrail.llm.usage import UsageMeter
from ragtrail.records import ModelSpec, ModelSpecError
from ragtrail.redact import is_redacted, redact, redact_json
from ragtrail.report.testset_sections import llm_models_line
from ragtrail.runtime import Runtime
from ragtrail.storage import tables
from ragtrail.storage.db import make_engine, upgrade
from ragtrail.storage.judge_store import JudgeStore
from ragtrail.storage.runs_store import RunStore
from ragtrail.train.citation.config import CitationTrainingConfig

SECRET = "Pa55w0rd-xyzzy"
SPEC = f"openai:model@http://user:{SECRET}@host/v1"


# ----------------------------------------------------------------------------- redact()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (SPEC, "openai:model@http://***@host/v1"),
        ("http://user:p@host:8000/v1", "http://***@host:8000/v1"),
        ("https://tok3n@github.com/org/repo.git", "https://***@github.com/org/repo.git"),
        ("postgresql+psycopg://u:p@h/db", "postgresql+psycopg://***@h/db"),
        ("postgresql://u:p%40ss@db.example:5432/rt", "postgresql://***@db.example:5432/rt"),
        # an unencoded "@" or "/" in the password: everything up to the host goes
        ("http://u:p@ss@h/x", "http://***@h/x"),
        ("postgresql://u:pa/ss@h:5432/db", "postgresql://***@h:5432/db"),
        ("https://u:p@es.example:9200", "https://***@es.example:9200"),
        ("http://@h/x", "http://***@h/x"),
        # credential-looking parameters, in the query and in the fragment
        ("https://h/v1?api_key=abc&b=1", "https://h/v1?api_key=***&b=1"),
        (
            "https://h/x?key=k&token=t&access_token=a",
            "https://h/x?key=***&token=***&access_token=***",
        ),
        ("https://h/x?password=p;secret=s", "https://h/x?password=***;secret=***"),
        ("https://h/cb#access_token=zz&state=1", "https://h/cb#access_token=***&state=1"),
        ("https://h/x?API_KEY=abc", "https://h/x?API_KEY=***"),
        (
            "https://h/x?apikey=a&accessToken=b&x-api-key=c",
            "https://h/x?apikey=***&accessToken=***&x-api-key=***",
        ),
        (
            "https://b.s3/k?X-Amz-Credential=AK%2F1&X-Amz-Signature=ff&X-Amz-Date=1",
            "https://b.s3/k?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Date=1",
        ),
        ("https://u:p@h/x?token=t", "https://***@h/x?token=***"),
    ],
)
def test_credentials_are_hidden(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected  # idempotent
    assert is_redacted(expected)


@pytest.mark.parametrize(
    "text",
    [
        "openai:model@http://host:8000/v1",
        "http://127.0.0.1:9/v1",
        "s3://bucket/models/m@v2",
        "s3://bucket/prefix?versionId=3",
        "hf:org/model",
        "registry:ragtrail-citation@champion",
        "builtin:smollm2-135m-instruct",
        "sqlite:////tmp/ragtrail.db",
        "file:///data/corpus",
        "https://h/x?monkey=1&tokens_used=3&q=a@b",
        "https://h/x?key=",
        "send to ops@example.com, password=hunter2 is not a URL parameter",
        "",
    ],
)
def test_text_without_credentials_is_unchanged(text: str) -> None:
    assert redact(text) == text
    assert not is_redacted(text)


def test_every_url_of_a_free_text_is_redacted() -> None:
    text = (
        f"cannot reach {SPEC} (tried http://a:b@one/v1 and 'https://c@two:9200'); "
        "database postgresql://u:pw@db/x?sslpassword=sp, models s3://bucket/m"
    )
    assert redact(text) == (
        "cannot reach openai:model@http://***@host/v1 (tried http://***@one/v1 and "
        "'https://***@two:9200'); database postgresql://***@db/x?sslpassword=*** "
        "models s3://bucket/m"
    )


def test_quotes_and_brackets_end_a_url() -> None:
    doc = json.dumps({"url": "http://u:p@h/v1", "email": "a@b.c"})
    assert json.loads(redact(doc)) == {"url": "http://***@h/v1", "email": "a@b.c"}
    assert redact("<http://u:p@h/>") == "<http://***@h/>"


def test_redact_json_walks_keys_values_and_lists() -> None:
    data = {"llm": SPEC, "n": 3, "ok": True, "none": None, "list": [SPEC, 1.5], SPEC: "k"}
    assert redact_json(data) == {
        "llm": "openai:model@http://***@host/v1",
        "n": 3,
        "ok": True,
        "none": None,
        "list": ["openai:model@http://***@host/v1", 1.5],
        "openai:model@http://***@host/v1": "k",
    }
    assert SECRET in json.dumps(data)  # the input is not changed


# ----------------------------------------------------------------------------- ModelSpec


def test_model_spec_travels_in_clear_but_shows_redacted() -> None:
    spec = ModelSpec.parse(SPEC)
    assert str(spec) == SPEC  # what loads the backend and keys its client
    assert spec.redacted() == "openai:model@http://***@host/v1"
    assert SECRET not in repr(spec) and "***" in repr(spec)
    assert ModelSpec.parse("hf:org/model").redacted() == "hf:org/model"


def test_spec_errors_never_quote_the_password() -> None:
    with pytest.raises(ModelSpecError) as caught:
        ModelSpec.parse(f"bogus:model@http://user:{SECRET}@host/v1")
    assert SECRET not in str(caught.value) and "***@host" in str(caught.value)
    with pytest.raises(ValueError) as loading:
        load_llm_backend(f"nokind:model@http://user:{SECRET}@host/v1")
    assert SECRET not in str(loading.value) and "***@host" in str(loading.value)


def test_a_redacted_spec_never_loads_a_model() -> None:
    with pytest.raises(ValueError, match=r"credentials redacted \(\*\*\*\)"):
        load_llm_backend(redact(SPEC))
    with pytest.raises(ValueError, match="redacted"):
        load_llm_backend("openai:model@http://h/v1?api_key=***")
    assert load_llm_backend(SPEC).model_id == "model"  # the real one loads (no connection yet)


# ----------------------------------------------------------------------------- settings


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("RAGTRAIL_CONFIG", "RAGTRAIL_HOME", "RAGTRAIL_GENERATION__LLM"):
        monkeypatch.delenv(name, raising=False)
    for role in ModelRole:
        monkeypatch.delenv(f"RAGTRAIL_MODELS__{role.upper()}", raising=False)
    return tmp_path


def test_setting_errors_never_quote_the_password(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGTRAIL_MODELS__CRITIC", f"nope:model@http://user:{SECRET}@host/v1")
    with pytest.raises(ConfigError) as caught:
        load_settings(home=isolated / "h")
    assert SECRET not in str(caught.value) and "RAGTRAIL_MODELS__CRITIC" in str(caught.value)
    with pytest.raises(ConfigError) as bad_url:
        check_database_url(f"nodialect://user:{SECRET}@host/db")
    assert SECRET not in str(bad_url.value)


def test_runtime_records_redacted_specs_and_loads_real_ones(isolated: Path) -> None:
    judge = f"openai:judge@http://j:{SECRET}@127.0.0.1:9/v1?api_key={SECRET}"
    rt = Runtime(
        load_settings(home=isolated / "h", generation={"llm": SPEC}, models={"judge": judge})
    )
    try:
        backends = rt.backends()
        assert SECRET not in json.dumps(backends)
        assert backends["llm (generator, labeller, critic, answerer, extractor)"] == redact(SPEC)
        assert backends["llm (judge)"] == "openai:judge@http://***@127.0.0.1:9/v1?api_key=***"
        assert SECRET not in llm_models_line(backends)
        assert rt.llm(ModelRole.JUDGE).backend.model_id == "judge"  # loaded from the real spec
    finally:
        rt.close()


def test_report_line_redacts_runs_stored_before_redaction() -> None:
    assert llm_models_line({"llm": SPEC}) == redact(SPEC)
    assert SECRET not in llm_models_line({"llm (a)": SPEC, "llm (b)": "hf:x"})


def test_training_config_records_the_teacher_redacted() -> None:
    config = CitationTrainingConfig(teacher=SPEC)
    assert config.teacher == SPEC  # what the teacher client is loaded from
    assert config.as_dict()["teacher"] == redact(SPEC)


# ----------------------------------------------------------------------------- stored rows


def test_judge_spec_hides_the_model_url() -> None:
    spec = JudgeSpec(
        name="labeller",
        version="j-1",
        role=JudgeRole.LABELLER,
        backend="llm",
        model=SPEC,
        verdict_type=VerdictType.CATEGORY,
        description=f"LLM {SPEC}",
    )
    assert SECRET not in json.dumps(spec.as_dict())
    assert JudgeSpec.from_dict(spec.as_dict()) == spec


def test_stores_write_no_password(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'rt.db'}")
    upgrade(engine)
    runs = RunStore(engine)
    runs.start_run("r1", "evaluate_citations", {"corpus": "c", "llm": SPEC})
    result = EvaluationResult(
        evaluator="citations",
        config={},
        primary_metric="f1",
        greater_is_better=True,
        queries=(),
        aggregates=(Aggregate("f1", {"label": "x"}, 0.5, 0.4, 0.6, 3),),
    )
    points = runs.record_evaluation(
        "r1",
        result,
        corpus="c",
        corpus_snapshot="s",
        qa_set_version="v",
        models={"llm": SPEC, "answerer": SPEC},
        judges={"judge": SPEC},
    )
    assert SECRET not in json.dumps([p.models for p in points] + [p.judges for p in points])
    JudgeStore(engine).record(
        spec={"name": "labeller", "version": "j-1", "role": "labeller", "model": SPEC},
        kind="categorical",
        reference="ref",
        n=1,
        metric="kappa",
        value=1.0,
        ci_low=1.0,
        ci_high=1.0,
        metrics={},
    )
    cache = SqlLLMCache(engine)
    request = GenerationRequest(messages=({"role": "user", "content": "hi"},))
    keys = [cache_key("openai", spec, "p", "1", request) for spec in (SPEC, SPEC + "x")]
    assert keys[0] != keys[1]  # different endpoints' credentials never share an entry
    cache.put_many(
        CacheEntry(
            key=k,
            backend="openai",
            model_id=SPEC,
            prompt_name="p",
            prompt_version="1",
            material={"model_id": SPEC, "messages": []},
            text="ok",
            prompt_tokens=1,
            completion_tokens=1,
        )
        for k in keys
    )
    assert set(cache.get_many(keys)) == set(keys)
    meter = UsageMeter(prices={SPEC: (1.0, 1.0)})
    meter.record("s", "openai", SPEC, calls=1, prompt_tokens=1000)
    meter.record("s", "openai", SPEC.replace(SECRET, "other"), calls=2)
    assert meter.flush(engine, "r1") == 1  # one redacted id: one row, the counts added
    with engine.connect() as conn:
        (usage,) = conn.execute(select(tables.llm_usage)).mappings()
        assert (usage["calls"], usage["cost_usd"]) == (3, 1.0)
    engine.dispose()
    raw = b"".join(path.read_bytes() for path in tmp_path.glob("rt.db*"))  # WAL included
    assert SECRET.encode() not in raw
    assert b"host/v1" in raw  # what was stored, redacted
