"""Sufficient context and selective generation: short answers or abstentions, Correct / Abstain /
Hallucinate, self-rated confidence (P(True), P(Correct)) and the answer-or-abstain policy."""
