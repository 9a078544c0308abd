"""Typed summaries: what each step of the night hands on, and what the report and the CLI read.

One record per feature (the retrieval scan of a set, its citation evaluation, its sufficiency
evaluation, a drift decision, a generated test set, the night as a whole) plus the typed QA-set
reference that names what was evaluated. Records are built by the pipeline, stored as strict JSON
(:meth:`~ragtrail.summaries.base.Record.to_json`) and read back with
:meth:`~ragtrail.summaries.base.Record.from_json`, which refuses a document that does not have the
record's shape; inside the process they travel as objects, and JSON appears only at the edges
(XCom, files, ``--json``).
"""
