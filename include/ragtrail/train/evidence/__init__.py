"""Training of the SEER evidence extractor (METHODS §10).

- :mod:`.lpo`: the LPO loop, a lambda-weighted DPO over each query's ranked evidence samples,
  LoRA on the extractor, reference = the same weights with the adapter disabled.

torch, transformers and peft are imported inside the training functions, so importing this
package loads none of them.
"""
