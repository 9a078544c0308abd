"""The ``ragtrail`` command line. Thin: parses arguments, calls the library, prints results.

This module builds the root typer :data:`app` (the ``ragtrail`` script and
``python -m ragtrail.cli``) from one module per command group:

- ``corpus_commands``: ``ingest``, ``search``, ``corpus quarantine|snapshots``
- ``qaset_commands``: ``generate``, ``testset list|export``, ``qaset add|list``
- ``eval_commands``: ``eval trec|retrieval|citations|sufficiency|selective|answers``
- ``runs_commands``: ``runs list|compare|pin|unpin|baselines``
- ``judge_commands``: ``judge calibrate|list``
- ``drift_commands``: ``drift check|list``
- ``nightly_commands``: ``nightly``
- ``models_commands``: ``models list|show|promote|rollback|register-generator``

and two shared ones: ``common`` (console, options, JSON output, user errors, runtime, progress
bars) and ``render`` (numbers, intervals, the best-strategy table). Heavy libraries are imported
inside the commands, so ``ragtrail --help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ragtrail.cli import (
    common,
    corpus_commands,
    drift_commands,
    eval_commands,
    judge_commands,
    models_commands,
    nightly_commands,
    qaset_commands,
    runs_commands,
)

__all__ = ["app"]

app = typer.Typer(help="ragtrail: keeps RAG systems honest every night.", no_args_is_help=True)


@app.callback()
def _options(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="Print the traceback along with an error message (for bug reports); "
            "RAGTRAIL_DEBUG=1 does the same.",
        ),
    ] = False,
) -> None:
    """Options of every command (given before the command: ``ragtrail --debug qaset add ...``)."""
    common.set_debug(debug)


# Root-level commands, in the order the help lists them.
app.command()(corpus_commands.ingest)
app.command()(corpus_commands.search)
app.command()(qaset_commands.generate)
app.command()(nightly_commands.nightly)
# Command groups, in the order the help lists them.
app.add_typer(eval_commands.eval_app, name="eval")
app.add_typer(corpus_commands.corpus_app, name="corpus")
app.add_typer(qaset_commands.testset_app, name="testset")
app.add_typer(runs_commands.runs_app, name="runs")
app.add_typer(judge_commands.judge_app, name="judge")
app.add_typer(qaset_commands.qaset_app, name="qaset")
app.add_typer(drift_commands.drift_app, name="drift")
app.add_typer(models_commands.models_app, name="models")
