"""Where: the replicas of each service, and which one each attempt goes to.

``services`` (logical origins and their replicas), ``replica`` (the public replica
types), ``selector`` (``ReplicaSelector``, ``PowerOfTwoChoices``), ``health`` (passive
outlier ejection), ``stalls`` (attempts in flight per replica: stalled, silent, the
memory of a freeze) and ``choice`` (the exclusions for a primary and for a backup).
Pure: the clock is injected.

Strictly private.
"""
