"""The citation step of the night: the answering model's citations on relevance mixtures and the
attributed-answer scenarios of one QA set (:mod:`.step`), and what the report reads of them
(:mod:`.views`)."""
