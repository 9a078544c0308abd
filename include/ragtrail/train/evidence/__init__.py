"""Training of the SEER evidence extractor by self-alignment (METHODS §10).

- :mod:`.data`: :func:`split_evidence_data` -> :class:`EvidenceSplit` (by question and document;
  the held-out part is the gate's frozen question set).
- :mod:`.preferences`: self-sampling from the extractor in service, dedup, the three experts,
  CoV (or equal) weights -> one ranked :class:`~.lpo.PreferenceList` per question.
- :mod:`.lpo`: the LPO loop, a lambda-weighted DPO over each query's ranked evidence samples,
  LoRA on the extractor, reference = the same weights with the adapter disabled.
- :mod:`.run`: :func:`train_evidence_model`, preferences -> LPO -> a model bundle with lineage.

torch, transformers and peft are imported inside the training functions, so importing this
package loads none of them.
"""
