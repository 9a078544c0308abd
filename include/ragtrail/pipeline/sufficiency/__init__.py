"""The sufficiency step of the night: sufficient context, Correct / Abstain / Hallucinate and selective
generation on one QA set (:mod:`.step`), the configured sufficiency raters and their calibration
(:mod:`.raters`), and what the report reads of it all (:mod:`.views`)."""
