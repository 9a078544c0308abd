"""``ragtrail models``: the model registry's versions, champion/challenger aliases, promotion
and rollback."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ragtrail.cli.common import JsonFlag, console, emit, user_errors
from ragtrail.cli.train_commands import train_app

models_app = typer.Typer(
    help="The model registry: versions, champion/challenger aliases, promotion and rollback.",
    no_args_is_help=True,
)
models_app.add_typer(train_app, name="train")
ReasonOpt = Annotated[str, typer.Option("--reason", help="Why; kept in the alias history.")]
ActorOpt = Annotated[
    str | None, typer.Option("--actor", help="Who (default: the USER environment variable).")
]


@contextmanager
def _registry() -> Iterator[Any]:
    """The configured model registry; registry errors end as one clear line (exit 2)."""
    from ragtrail.config import load_settings
    from ragtrail.models.mlflow_registry import MlflowModelRegistry

    with user_errors():
        yield MlflowModelRegistry.from_settings(load_settings())


def _held_by(version: int | None) -> str:
    """An alias's version in the alias history: ``v3``, or ``none`` before it was first set."""
    return "none" if version is None else f"v{version}"


def _actor(actor: str | None) -> str:
    """Who acts: ``--actor``, else the USER environment variable, else "unknown"."""
    return actor or os.environ.get("USER") or "unknown"


@models_app.command("list")
def models_list(
    name: Annotated[str | None, typer.Argument(help="List this model's versions.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List registered models with their aliases, or one model's versions (newest first)."""
    with _registry() as registry:
        if name is None:
            models = [m.as_dict() for m in registry.list_models()]
            if as_json:
                emit(models)
                return
            table = Table("model", "kind", "versions", "latest", "aliases")
            for m in models:
                aliases = ", ".join(f"{a}=v{v}" for a, v in m["aliases"].items())
                table.add_row(
                    m["name"], m["kind"], str(m["n_versions"]), str(m["latest_version"]), aliases
                )
            Console().print(table)
            return
        versions = registry.list_versions(name)
    if as_json:
        emit([v.as_dict() for v in versions])
        return
    table = Table("version", "aliases", "status", "gate", "digest", "created")
    for v in versions:
        table.add_row(
            f"v{v.version}",
            ", ".join(v.aliases),
            v.status,
            v.tags.get("ragtrail.gate.decision", ""),
            v.digest[:12],
            f"{v.created_at:%Y-%m-%d %H:%M:%S}",
        )
    Console().print(table)


@models_app.command("show")
def models_show(
    name: Annotated[str, typer.Argument(help="Registered model name.")],
    ref: Annotated[str, typer.Argument(help="Version number or alias.")] = "champion",
    as_json: JsonFlag = False,
) -> None:
    """Show a version: source, digest, aliases, lineage, gate decisions and alias events."""
    with _registry() as registry:
        version = registry.get_version(name, ref)
        gates = registry.gate_decisions(name, version.version)
        events = [
            e.as_dict()
            for e in registry.alias_history(name)
            if version.version in (e.version, e.previous)
        ]
    view = {**version.as_dict(), "gate_decisions": gates, "alias_events": events}
    if as_json:
        emit(view)
        return
    out = Console()
    out.print(
        f"[bold]{name} v{version.version}[/bold] ({version.kind}) {', '.join(version.aliases)}"
    )
    out.print(f"status: {version.status}   digest: {version.digest}")
    out.print(f"source: {version.source}", highlight=False)
    out.print(f"base model: {version.base_model}", highlight=False)
    out.print_json(json.dumps(version.lineage or {}))
    for gate in gates:
        verdict = "promote" if gate["promote"] else "reject"
        out.print(f"gate {gate['at']}: {verdict}: {gate['reason']}", highlight=False)
    for event in events:
        out.print(
            f"{event['at']}: {event['action']} {event['alias']} "
            f"{_held_by(event['previous'])} -> {_held_by(event['version'])} by {event['actor']}: "
            f"{event['reason']}",
            highlight=False,
        )


@models_app.command("promote")
def models_promote(
    name: Annotated[str, typer.Argument(help="Registered model name.")],
    version: Annotated[int, typer.Argument(min=1, help="The version to make champion.")],
    reason: ReasonOpt,
    actor: ActorOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Make VERSION the champion by hand (overrides the gate; who and why are recorded)."""
    from ragtrail.models.registry import promote

    who = _actor(actor)
    with _registry() as registry:
        event = promote(registry, name, version, actor=who, reason=reason)
        registry.record_gate_decision(
            name,
            version,
            {"manual_override": True, "actor": who, "previous_champion": event.previous},
            promote=True,
            reason=f"manual promotion by {who}: {reason}",
        )
    if as_json:
        emit(event.as_dict())
        return
    console.print(
        f"{name}: champion {_held_by(event.previous)} -> {_held_by(event.version)} "
        f"({who}: {reason})"
    )


@models_app.command("rollback")
def models_rollback(
    name: Annotated[str, typer.Argument(help="Registered model name.")],
    reason: ReasonOpt,
    actor: ActorOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Move champion back to the version that held it before the current one."""
    from ragtrail.models.registry import rollback

    who = _actor(actor)
    with _registry() as registry:
        event = rollback(registry, name, actor=who, reason=reason)
    if as_json:
        emit(event.as_dict())
        return
    console.print(
        f"{name}: champion rolled back {_held_by(event.previous)} -> {_held_by(event.version)} "
        f"({who})"
    )


@models_app.command("register-generator")
def models_register_generator(
    generator_dir: Annotated[
        str, typer.Argument(help="A fine-tuned generator's output directory or s3:// URI.")
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="Registered model (default: the settings').")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Register a fine-tuned question generator as a new version (no alias is moved)."""
    from ragtrail.config import load_settings
    from ragtrail.train.registration import register_generator

    with user_errors():
        settings = load_settings()
    model = name or settings.registry.generator_model_name
    with _registry() as registry:
        version = register_generator(
            registry,
            model,
            generator_dir,
            cache_dir=settings.resolved_model_cache_dir,
            s3_endpoint_url=settings.s3_endpoint_url,
        )
    if as_json:
        emit(version.as_dict())
        return
    console.print(f"{model}: registered v{version.version} from {generator_dir}")
