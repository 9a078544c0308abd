"""Comparing runs: paired differences with bootstrap intervals, run-to-run comparison per facet,
the drift decision, corpus drift evidence and the champion/challenger promotion gate."""
