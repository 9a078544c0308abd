"""Statistics behind every number ragtrail shows: intervals valid at their n, and power.

- :mod:`.intervals`: the interval for a proportion, a bounded mean or an agreement statistic,
  chosen by its kind and n, with the method named;
- :mod:`.power`: the minimum detectable effect of a paired comparison and the n it would need.
"""
