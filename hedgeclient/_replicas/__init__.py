"""Where: the replicas of each service, and which one each attempt goes to.

``choice`` (the race's four calls: a primary, a backup, an attempt started, an attempt
ended; and the attempts in flight per replica, the evidence of stalls), ``avoidance``
(what a choice avoids and in which order: stalled and silent replicas, zones, replicas
tried), ``selector`` (``ReplicaSelector``, ``PowerOfTwoChoices``), ``health`` (passive
outlier ejection, kept by the selector), ``services`` (logical origins and their
replicas) and ``replica`` (the public replica types). One choice runs through
``choice`` and ``selector``. Pure: the clock is injected.

Strictly private.
"""
