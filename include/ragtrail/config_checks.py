"""Checks on what a user configures: the YAML settings file, the ``RAGTRAIL_*`` environment, and
the values in both. Every problem is one :class:`ConfigError` line naming where it is.

- A key that is not a setting is refused, in ``ragtrail.yaml`` at every nesting level and in the
  environment, with the closest known key as a suggestion (a typo must not run with defaults).
- ``RAGTRAIL_*`` variables that are not settings but that ragtrail, its scripts, its Docker files
  or its tests read are listed in :data:`NON_SETTING_VARIABLES`; any other ``RAGTRAIL_*`` name is
  an unknown setting. ``tests/unit/test_config_checks.py`` fails when the code reads a
  ``RAGTRAIL_*`` name that is neither.
- The YAML file must be UTF-8, valid YAML without repeated keys, with a mapping at the top.
- A value of the wrong type becomes one line naming the setting and its source (the variable or
  the file), instead of pydantic's multi-line report.

Nothing here imports :mod:`ragtrail.config`: the settings model is passed in.
"""

from __future__ import annotations

import difflib
import json
import reprlib
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from ragtrail.jsonsafe import JsonObject
from ragtrail.redact import redact

ENV_PREFIX = "RAGTRAIL_"
ENV_DELIMITER = "__"

NON_SETTING_VARIABLES: dict[str, str] = {
    "RAGTRAIL_CONFIG": "the YAML settings file (default $RAGTRAIL_HOME/ragtrail.yaml, then "
    "./ragtrail.yaml)",
    "RAGTRAIL_DEBUG": "1: print the traceback with a one-line error (the CLI's --debug)",
    "RAGTRAIL_LLM_BASE_URL": "base URL of an OpenAI-compatible endpoint (openai: specs)",
    "RAGTRAIL_LLM_API_KEY": "API key of that endpoint",
    "RAGTRAIL_LLM_MODEL": "model served there, when a spec names none",
    "RAGTRAIL_SHARED_DIR": "the shared data folder (reference data sets, trec_eval fixture)",
    "RAGTRAIL_DATA_DOCS_URL": "Airflow plugin: a nav link to a Great Expectations Data Docs site",
    "RAGTRAIL_IMAGE": "docker compose: the Airflow image",
    "RAGTRAIL_GPU_IMAGE": "docker compose: the GPU worker image",
    "RAGTRAIL_EXTRAS": "docker build: the package extras to install",
    "RAGTRAIL_SERVICES_DIR": "scripts/services.sh: state of the test PostgreSQL and S3",
    "RAGTRAIL_TEST_PG_URL": "tests: a PostgreSQL server to test against",
    "RAGTRAIL_TEST_PG_PORT": "scripts/services.sh: port of the test PostgreSQL",
    "RAGTRAIL_TEST_S3_ENDPOINT": "tests: an S3 endpoint (moto) to test against",
    "RAGTRAIL_TEST_S3_PORT": "scripts/services.sh: port of the test S3 endpoint",
    "RAGTRAIL_TEST_MODEL_CACHE": "tests: where converted test models are cached",
    "RAGTRAIL_SYSTEM_TEST_TIMEOUT": "tests: time budget of the Airflow system test, seconds",
    "RAGTRAIL_AIRFLOW_TEST_ROOT": "tests: marks an isolated Airflow test home",
}
"""``RAGTRAIL_*`` variables that are not settings, and what reads them. Keep it in step with the
README section "What ragtrail refuses and why"."""


class ConfigError(ValueError):
    """A configuration problem (an unknown key, an unreadable file, a bad value): one line."""


# ----------------------------------------------------------------------------- the key tree


@dataclass(frozen=True)
class Key:
    """One configurable key: a section (``children``) or a value. A mapping value (``dict``
    fields) takes any key below it; a structured value is written as JSON in the environment."""

    children: dict[str, Key] | None = None
    mapping: bool = False
    structured: bool = False
    dotted: str = field(default="", compare=False)


def _unoptional(annotation: Any) -> list[Any]:
    if get_origin(annotation) in (Union, types.UnionType):
        return [a for a in get_args(annotation) if a is not type(None)]
    return [annotation]


@cache
def key_tree(model: type[BaseModel], prefix: str = "") -> dict[str, Key]:
    """The keys of ``model``: nested models are sections, every other field a value (computed
    once per model; do not modify the result)."""
    tree: dict[str, Key] = {}
    for name, info in model.model_fields.items():
        dotted = f"{prefix}{name}"
        kinds = _unoptional(info.annotation)
        section = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
        if section is not None:
            tree[name] = Key(key_tree(section, f"{dotted}."), structured=True, dotted=dotted)
            continue
        origins = {get_origin(k) or k for k in kinds}
        mapping = bool(origins & {dict, Mapping})
        structured = mapping or bool(origins & {list, tuple, set, frozenset, Sequence})
        tree[name] = Key(mapping=mapping, structured=structured, dotted=dotted)
    return tree


def _walk(tree: Mapping[str, Key]) -> list[Key]:
    keys = []
    for key in tree.values():
        keys.append(key)
        keys.extend(_walk(key.children or {}))
    return keys


def known_keys(model: type[BaseModel]) -> list[str]:
    """Every section and value of ``model`` as a dotted name (``retrieval.text_weights``)."""
    return [k.dotted for k in _walk(key_tree(model))]


def env_name(dotted: str) -> str:
    """The variable of a dotted key: ``chunking.max_tokens`` -> ``RAGTRAIL_CHUNKING__MAX_TOKENS``."""
    return ENV_PREFIX + dotted.replace(".", ENV_DELIMITER).upper()


def setting_env_names(model: type[BaseModel]) -> list[str]:
    """The variable of every section and value of ``model``."""
    return [env_name(k) for k in known_keys(model)]


def _closest(word: str, choices: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return found[0] if found else None


def _unknown(data: Mapping[Any, Any], tree: Mapping[str, Key], prefix: str = "") -> list[str]:
    """Dotted names of the keys of ``data`` that ``tree`` does not know (sections recursed)."""
    unknown = []
    for raw_key, value in data.items():
        dotted = f"{prefix}{raw_key}"
        key = tree.get(raw_key) if isinstance(raw_key, str) else None
        if key is None:
            unknown.append(dotted)
        elif key.children is not None and isinstance(value, Mapping):
            unknown.extend(_unknown(value, key.children, f"{dotted}."))
    return unknown


def _refuse(unknown: Sequence[str], hints: Mapping[str, str | None], where: str = "",
            where_many: str | None = None) -> None:  # fmt: skip
    """Raise one ConfigError line for the ``unknown`` names (none: no error), each with its
    suggestion from ``hints``; ``where`` follows one name, ``where_many`` (default ``where``)
    the list of several."""
    if not unknown:
        return
    if len(unknown) == 1:
        (name,) = unknown
        hint = f"; did you mean {hints[name]}?" if hints.get(name) else ""
        raise ConfigError(f"unknown setting {name}{where}{hint}")
    listed = ", ".join(
        f"{name} (did you mean {hints[name]}?)" if hints.get(name) else name for name in unknown
    )
    raise ConfigError(f"unknown settings{where if where_many is None else where_many}: {listed}")


def _dotted_hints(unknown: Sequence[str], model: type[BaseModel]) -> dict[str, str | None]:
    choices = known_keys(model)
    return {name: _closest(name, choices) for name in unknown}


def check_yaml_keys(data: Mapping[Any, Any], model: type[BaseModel], source: Path | str) -> None:
    """ConfigError for every key of ``data`` (the YAML file ``source``) that is no setting."""
    unknown = _unknown(data, key_tree(model))
    _refuse(unknown, _dotted_hints(unknown, model), f" in {source}")


def check_env_names(environ: Mapping[str, str], model: type[BaseModel]) -> None:
    """ConfigError for every ``RAGTRAIL_*`` variable that is neither a setting of ``model`` nor
    in :data:`NON_SETTING_VARIABLES` (names compared case-insensitively, as pydantic-settings
    reads them); a section given as a JSON object has its keys checked too."""
    tree = key_tree(model)
    unknown: list[str] = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in NON_SETTING_VARIABLES:
            continue
        key = _env_key(upper, tree)
        if key is None:
            unknown.append(name)
        elif key.children is not None:
            try:
                value = json.loads(environ[name])
            except (ValueError, RecursionError):
                continue  # not JSON: pydantic reports the value
            if isinstance(value, Mapping):
                inner = _unknown(value, key.children, f"{key.dotted}.")
                _refuse(inner, _dotted_hints(inner, model), f" in {name}")
    if unknown:
        names = (*setting_env_names(model), *NON_SETTING_VARIABLES)
        choices = [n.removeprefix(ENV_PREFIX) for n in names]
        hints = {n: _closest(n.upper().removeprefix(ENV_PREFIX), choices) for n in unknown}
        env_hints = {n: ENV_PREFIX + h if h else None for n, h in hints.items()}
        _refuse(unknown, env_hints, where_many=" in the environment")


def _env_key(upper: str, tree: Mapping[str, Key]) -> Key | None:
    """The key a ``RAGTRAIL_*`` name sets, or None. Below a mapping value any name goes."""
    parts = upper.removeprefix(ENV_PREFIX).split(ENV_DELIMITER)
    level: Mapping[str, Key] | None = tree
    key: Key | None = None
    for part in parts:
        if key is not None and key.mapping:
            return key
        if level is None:
            return None
        key = next((k for name, k in level.items() if name.upper() == part), None)
        if key is None:
            return None
        level = key.children
    return key


# ------------------------------------------------------------------------------- YAML file


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            try:
                repeated = key in seen
                seen.add(key)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


def read_settings_yaml(path: Path) -> JsonObject:
    """The mapping in the YAML settings file ``path`` (empty file: ``{}``); ConfigError, one line
    with the file and the position, for anything that is not a UTF-8 YAML mapping."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the settings file ({exc.strerror or exc})"
        ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1})"
        ) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(exc.problem or exc.context or "unreadable").split())
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single value ({data!r:.40})"
        raise ConfigError(f"{path}: the top level must be a mapping of settings, not {kind}")
    return data


# --------------------------------------------------------------------------- bad values


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlevel = 2
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4
_MAX_LISTED = 5
_SECRET_WORDS = ("password", "api_key", "token", "secret", "database_url")


def _shown(value: Any, name: str = "") -> str:
    """``value`` for a message: shortened, hidden when ``name`` looks like a secret's, and with
    the credentials of any URL in it redacted (a model spec's endpoint, an S3 endpoint)."""
    last = name.lower().replace(ENV_DELIMITER, ".").rsplit(".", 1)[-1]
    if any(last == word or last.endswith(f"_{word}") for word in _SECRET_WORDS):
        return "<hidden>"
    # bounded: YAML aliases can make a value exponentially large; redacted whole, then shortened
    return _REPR.repr(redact(value) if isinstance(value, str) else value)


def _error_line(
    error: Mapping[str, Any],
    environ: Mapping[str, str],
    yaml_path: Path | None,
    overrides: Mapping[str, Any],
) -> str:
    loc = [str(part) for part in error["loc"]]
    dotted = ".".join(loc)
    message = " ".join(str(error["msg"]).split()).removeprefix("Value error, ")
    upper_env = {name.upper(): name for name in environ}
    got = _shown(error.get("input"), dotted)
    if loc and loc[0] in overrides:
        return f"invalid setting {dotted}: {message} (got {got})"
    for depth in range(len(loc), 0, -1):
        name = upper_env.get(env_name(".".join(loc[:depth])))
        if name is not None:
            return f"invalid setting {name}={_shown(environ[name], name)}: {message}"
    where = f" in {yaml_path}" if yaml_path is not None else ""
    return f"invalid setting {dotted}{where}: {message} (got {got})"


def _unparsable_env(environ: Mapping[str, str], model: type[BaseModel]) -> str | None:
    """The first structured variable whose value is not JSON, described, or None."""
    tree = key_tree(model)
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        key = _env_key(upper, tree)
        if key is None or not key.structured:
            continue
        try:
            json.loads(environ[name])
        except RecursionError:
            return f"invalid setting {name}: JSON nested too deeply"
        except ValueError as exc:
            return (
                f"invalid setting {name}={_shown(environ[name], name)}: lists and mappings "
                f"are written as JSON in the environment, e.g. [0.3, 0.5] ({exc})"
            )
    return None


def describe_settings_error(
    exc: Exception,
    model: type[BaseModel],
    environ: Mapping[str, str],
    yaml_path: Path | None,
    overrides: Mapping[str, Any],
) -> ConfigError:
    """One ConfigError line for a failure to build the settings: each invalid value with its
    source (the variable, the YAML file or the caller), or the variable that is not JSON."""
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        lines = [
            redact(_error_line(e, environ, yaml_path, overrides)) for e in errors[:_MAX_LISTED]
        ]
        more = f" (+{len(errors) - _MAX_LISTED} more)" if len(errors) > _MAX_LISTED else ""
        return ConfigError("; ".join(lines) + more)
    unparsable = _unparsable_env(environ, model)
    return ConfigError(redact(unparsable or " ".join(str(exc).split())))


def check_database_url(url: str | None) -> None:
    """ConfigError when ``database_url`` is no SQLAlchemy URL of an installed dialect. The value
    is not echoed: it may hold a password. (The example URL has no userinfo: errors are printed
    redacted, and ``user@`` would read ``***@``.)"""
    if url is None:
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(url).get_dialect()
    except ArgumentError as exc:
        reason = redact(" ".join(str(exc).split()))
        raise ConfigError(
            f"invalid setting database_url (RAGTRAIL_DATABASE_URL): {reason}; expected e.g. "
            "sqlite:///path/ragtrail.db or postgresql+psycopg://host:5432/db (user:password@ "
            "before the host)"
        ) from None
