"""Retrieval evaluation: Recall@k and friends per question label across the text-weight scan, and
the TREC qrels/run formats that trec_eval reads."""
