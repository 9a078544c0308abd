"""``python -m ragtrail.cli``: the same command line as the ``ragtrail`` script."""

from __future__ import annotations

from ragtrail.cli import app

if __name__ == "__main__":
    app()
