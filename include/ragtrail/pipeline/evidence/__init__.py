"""The evidence extractor's nightly evaluation (SEER, METHODS §10): :mod:`.step` runs it on one
QA set, :mod:`.views` reads what it stored."""
