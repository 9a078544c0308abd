"""Settings users write: unknown keys refused with a suggestion (YAML at every level, the
environment), the YAML file read strictly, bad values as one line naming their source, and the
list of ``RAGTRAIL_*`` variables that are not settings kept in step with the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragtrail.config import Settings, load_settings
from ragtrail.config_checks import (
    NON_SETTING_VARIABLES,
    ConfigError,
    check_env_names,
    known_keys,
    setting_env_names,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ragtrail.yaml and no RAGTRAIL_* variable from the surroundings."""
    monkeypatch.chdir(tmp_path)
    for name in list(__import__("os").environ):
        if name.upper().startswith("RAGTRAIL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("RAGTRAIL_HOME", str(tmp_path / "home"))


def _yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | bytes) -> Path:
    path = tmp_path / "ragtrail.yaml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    monkeypatch.setenv("RAGTRAIL_CONFIG", str(path))
    return path


def _refused(pattern: str) -> str:
    with pytest.raises(ConfigError, match=pattern) as caught:
        load_settings()
    assert "\n" not in str(caught.value)
    return str(caught.value)


# ------------------------------------------------------------------------------ unknown keys


def test_known_keys_are_every_section_and_value() -> None:
    keys = set(known_keys(Settings))
    assert {"retrieval", "retrieval.text_weights", "chunking.max_tokens", "seed"} <= keys
    assert "RAGTRAIL_CHUNKING__MAX_TOKENS" in setting_env_names(Settings)
    assert not set(NON_SETTING_VARIABLES) & set(setting_env_names(Settings))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("retrieval:\n  txt_weights: [0.5]\n",
         "unknown setting retrieval.txt_weights in {path}; did you mean retrieval.text_weights?"),
        ("chunking:\n  max_tokns: 100\n",
         "unknown setting chunking.max_tokns in {path}; did you mean chunking.max_tokens?"),
        ("retreival:\n  text_weights: [0.5]\n",
         "unknown setting retreival in {path}; did you mean retrieval?"),
        ("sed: 3\n", "unknown setting sed in {path}; did you mean seed?"),
        ("zzz: 1\n", "unknown setting zzz in {path}"),
        ("retrieval:\n  txt_weights: [0.5]\nzzz: 1\n",
         "unknown settings in {path}: retrieval.txt_weights (did you mean "
         "retrieval.text_weights?), zzz"),
        ("1: x\n", "unknown setting 1 in {path}"),
    ],
)  # fmt: skip
def test_unknown_yaml_keys_are_refused_at_every_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    path = _yaml(tmp_path, monkeypatch, text)
    assert _refused("unknown setting") == message.format(path=path)


def test_mapping_values_take_any_key_and_secrets_are_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _yaml(
        tmp_path,
        monkeypatch,
        "drift:\n  thresholds: {'retrieval:recall@5': 0.1}\n"
        "generation:\n  critique_thresholds: {anything: 2}\n",
    )
    settings = load_settings()
    assert settings.drift.thresholds == {"retrieval:recall@5": 0.1}
    _yaml(tmp_path, monkeypatch, "llm_api_key: sk\n")
    _refused(r"secrets \['llm_api_key'\] belong in env vars")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("RAGTRAIL_CHUNKING__MAX_TOKNS",
         "unknown setting RAGTRAIL_CHUNKING__MAX_TOKNS; did you mean "
         "RAGTRAIL_CHUNKING__MAX_TOKENS?"),
        ("ragtrail_retrieval__txt_weights",
         "unknown setting ragtrail_retrieval__txt_weights; did you mean "
         "RAGTRAIL_RETRIEVAL__TEXT_WEIGHTS?"),
        ("RAGTRAIL_DEBUGG", "unknown setting RAGTRAIL_DEBUGG; did you mean RAGTRAIL_DEBUG?"),
        ("RAGTRAIL_SEED__X", "unknown setting RAGTRAIL_SEED__X; did you mean RAGTRAIL_SEED?"),
        ("RAGTRAIL_ZZZZZZZZ", "unknown setting RAGTRAIL_ZZZZZZZZ"),
    ],
)  # fmt: skip
def test_unknown_environment_variables_are_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, message: str
) -> None:
    monkeypatch.setenv(name, "1")
    assert _refused("unknown setting") == message
    with pytest.raises(ConfigError):
        Settings()  # every construction checks, not only load_settings


def test_settings_and_other_variables_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NON_SETTING_VARIABLES:
        monkeypatch.setenv(name, "x")
    monkeypatch.delenv("RAGTRAIL_CONFIG")  # that one is read: it must name a file
    monkeypatch.setenv("ragtrail_seed", "5")
    monkeypatch.setenv("RAGTRAIL_DRIFT__THRESHOLDS", '{"retrieval:recall@5": 0.2}')
    monkeypatch.setenv("RAGTRAIL_CHUNKING__MAX_TOKENS", "100")
    monkeypatch.setenv("OTHER_TOOL_SETTING", "x")
    settings = load_settings()
    assert settings.seed == 5 and settings.chunking.max_tokens == 100
    assert settings.drift.thresholds == {"retrieval:recall@5": 0.2}


def test_a_section_given_as_json_has_its_keys_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGTRAIL_CHUNKING", '{"max_tokns": 100}')
    assert _refused("unknown") == (
        "unknown setting chunking.max_tokns in RAGTRAIL_CHUNKING; did you mean chunking.max_tokens?"
    )
    monkeypatch.setenv("RAGTRAIL_CHUNKING", '{"max_tokens": 100}')
    assert load_settings().chunking.max_tokens == 100


def test_several_unknown_variables_are_listed_together() -> None:
    env = {"RAGTRAIL_CHUNKING__MAX_TOKNS": "1", "RAGTRAIL_ZZZZZZZZ": "2", "PATH": "/bin"}
    with pytest.raises(ConfigError) as caught:
        check_env_names(env, Settings)
    assert str(caught.value) == (
        "unknown settings in the environment: RAGTRAIL_CHUNKING__MAX_TOKNS (did you mean "
        "RAGTRAIL_CHUNKING__MAX_TOKENS?), RAGTRAIL_ZZZZZZZZ"
    )


# --------------------------------------------------------------------------------- the file


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"retrieval:\n  text_weights: [0.1, 0.2\n",
         r"{path}: invalid YAML at line 3, column 1: expected ',' or '\]', but got '<stream end>'"),
        (b"seed: 1\nchunking: {max_tokens: 100}\nseed: 2\n",
         r"{path}: invalid YAML at line 3, column 1: key 'seed' is given twice"),
        (b"chunking:\n  max_tokens: 1\n  max_tokens: 2\n",
         r"{path}: invalid YAML at line 3, column 3: key 'max_tokens' is given twice"),
        (b"- a\n- b\n", r"{path}: the top level must be a mapping of settings, not a list"),
        (b"just text\n",
         r"{path}: the top level must be a mapping of settings, not a single value \('just text'\)"),
        (b"seed: caf\xe9\n", r"{path}: not UTF-8 text \(byte 0xe9 at byte 10\)"),
        (b"\tseed: 1\n", r"{path}: invalid YAML at line 1, column 1: found character '\\t'"),
    ],
)  # fmt: skip
def test_an_unreadable_yaml_file_is_one_line_with_its_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: bytes, message: str
) -> None:
    path = _yaml(tmp_path, monkeypatch, text)
    _refused("^" + message.format(path=re.escape(str(path))))


def test_an_empty_file_or_one_with_a_bom_is_fine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _yaml(tmp_path, monkeypatch, b"")
    assert load_settings().seed == 13
    _yaml(tmp_path, monkeypatch, b"\xef\xbb\xbfseed: 4\n")
    assert load_settings().seed == 4


def test_yaml_from_home_is_checked_too(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "ragtrail.yaml").write_text("retrieval:\n  txt_weights: [0.5]\n")
    _refused(rf"^unknown setting retrieval\.txt_weights in {re.escape(str(home))}/ragtrail.yaml")


def test_config_pointing_at_a_directory_or_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGTRAIL_CONFIG", str(tmp_path))
    _refused(rf"^RAGTRAIL_CONFIG points at a directory, not a YAML file: {tmp_path}$")
    monkeypatch.setenv("RAGTRAIL_CONFIG", "/dev/null")
    _refused(r"^RAGTRAIL_CONFIG points at something other than a file, not a YAML file: /dev/null$")
    monkeypatch.setenv("RAGTRAIL_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(FileNotFoundError, match="RAGTRAIL_CONFIG points at a missing file"):
        load_settings()


# ------------------------------------------------------------------------------- bad values


def test_a_bad_value_names_the_setting_and_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _yaml(tmp_path, monkeypatch, "chunking:\n  max_tokens: lots\n")
    assert _refused("invalid") == (
        f"invalid setting chunking.max_tokens in {path}: Input should be a valid integer, "
        "unable to parse string as an integer (got 'lots')"
    )
    monkeypatch.setenv("RAGTRAIL_CHUNKING__MAX_TOKENS", "abc")  # the environment wins
    assert _refused("invalid") == (
        "invalid setting RAGTRAIL_CHUNKING__MAX_TOKENS='abc': Input should be a valid "
        "integer, unable to parse string as an integer"
    )
    monkeypatch.delenv("RAGTRAIL_CHUNKING__MAX_TOKENS")
    _yaml(tmp_path, monkeypatch, "chunking: 5\nseed: x\n")
    message = _refused("invalid")
    assert message.startswith(f"invalid setting chunking in {path}: Input should be a valid")
    assert f"; invalid setting seed in {path}: Input should be a valid integer" in message


def test_many_bad_values_and_alias_bombs_stay_one_short_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    levels = ['    l0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"    l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 6)]
    _yaml(tmp_path, monkeypatch, "drift:\n  exclude_facets:\n" + "\n".join(levels) + "\n")
    message = _refused(r"^invalid setting drift\.exclude_facets\.l1\.0 in ")
    assert message.endswith(" more)") and message.count("invalid setting") == 5
    assert len(message) < 2000


def test_a_secret_value_is_never_echoed() -> None:
    from pydantic import BaseModel

    from ragtrail.config_checks import describe_settings_error

    class Secretive(BaseModel):
        es_password: int = 0

    try:
        Secretive(es_password="hunter2")  # type: ignore[arg-type]
    except Exception as exc:
        env = {"RAGTRAIL_ES_PASSWORD": "hunter2"}
        message = str(describe_settings_error(exc, Secretive, env, None, {}))
        assert message.startswith("invalid setting RAGTRAIL_ES_PASSWORD=<hidden>: ")
        message = str(describe_settings_error(exc, Secretive, {}, Path("x.yaml"), {}))
        assert message.endswith("(got <hidden>)") and "hunter2" not in message


def test_a_structured_variable_that_is_not_json_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGTRAIL_RETRIEVAL__TEXT_WEIGHTS", "0.3,0.5")
    assert _refused("invalid").startswith(
        "invalid setting RAGTRAIL_RETRIEVAL__TEXT_WEIGHTS='0.3,0.5': lists and mappings are "
        "written as JSON in the environment"
    )


@pytest.mark.parametrize(
    ("url", "reason"),
    [("not a url", "Could not parse SQLAlchemy URL"),
     ("postgresql+nodriver://u:secret@h/db", "Can't load plugin")],
)  # fmt: skip
def test_a_database_url_that_is_no_url_is_one_line_without_the_password(
    monkeypatch: pytest.MonkeyPatch, url: str, reason: str
) -> None:
    monkeypatch.setenv("RAGTRAIL_DATABASE_URL", url)
    message = _refused(r"^invalid setting database_url \(RAGTRAIL_DATABASE_URL\): ")
    assert reason in message and "secret" not in message


def test_a_home_that_cannot_be_created_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("RAGTRAIL_HOME", str(blocker / "home"))
    _refused(rf"^cannot create the ragtrail home {re.escape(str(blocker))}/home \(")


# ------------------------------------------------------------- RAGTRAIL_* names in the code

SCANNED = ("include", "dags", "plugins", "scripts", "docker", "tests", "benchmarks", "Makefile")
SUFFIXES = {".py", ".sh", ".yml", ".yaml", ".toml", ".cfg", ".ini", ".env", ""}
NOT_VARIABLES = {"RAGTRAIL_DAGS", "RAGTRAIL_SURFACE"}
"""Python constants that happen to start with RAGTRAIL_ (scripts/airflow_local.py, tests/dags)."""
DELIBERATE_TYPOS = {"tests/unit/test_config_checks.py", "tests/unit/cli/test_user_errors.py"}


def _names_in_code(skip: frozenset[str] = frozenset()) -> dict[str, set[str]]:
    """Every RAGTRAIL_* token in the code, with the files it appears in (``skip``: files left
    out, as repository-relative paths)."""
    found: dict[str, set[str]] = {}
    for top in SCANNED:
        root = REPO / top
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in files:
            rel = path.relative_to(REPO).as_posix()
            if (
                not path.is_file()
                or "__pycache__" in path.parts
                or any(part.endswith(".egg-info") for part in path.parts)  # pip's build output
                or rel in DELIBERATE_TYPOS | skip
                or (path.suffix not in SUFFIXES and path.name not in {"Dockerfile", "Makefile"})
            ):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for name in re.findall(r"RAGTRAIL_[A-Z0-9_]+", text):
                found.setdefault(name, set()).add(rel)
    return found


def test_every_ragtrail_variable_in_the_code_is_a_setting_or_listed() -> None:
    settings = set(setting_env_names(Settings))
    unexplained = {
        name: sorted(files)
        for name, files in _names_in_code().items()
        if name not in settings
        and name not in NON_SETTING_VARIABLES
        and name not in NOT_VARIABLES
        and not (name.endswith("_") and any(s.startswith(name) for s in settings))
    }
    assert unexplained == {}, (
        "RAGTRAIL_* names that are neither settings nor in "
        "ragtrail.config_checks.NON_SETTING_VARIABLES (add them there, with what reads them, "
        "and to the README): " + str(unexplained)
    )


def test_every_listed_variable_is_still_used() -> None:
    used = _names_in_code(skip=frozenset({"include/ragtrail/config_checks.py"}))
    assert sorted(set(NON_SETTING_VARIABLES) - set(used)) == []
