"""Attributed answers (AIR): cited answers split into statements, entailment-based attribution
metrics, the attributed-answer scenarios (G, RTG-*, GTR) and the scoring of answers logged
anywhere (HAGRID, a production system's log)."""
