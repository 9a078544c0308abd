"""The drift step of the night: each set's run against its baseline, decided and stored
(:mod:`.step`), and what the report, CLI and drift event read of a decision (:mod:`.views`)."""
