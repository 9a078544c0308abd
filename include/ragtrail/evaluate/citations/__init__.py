"""Citation evaluation with relevance mixtures (RAGE): mixtures of relevant, irrelevant and
seemingly relevant passages, the answering model's cited answers, citation precision / recall /
F1 against the known relevance, and the random-citation baseline."""
