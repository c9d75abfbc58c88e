"""kube-scheduler's extender verbs (filter, prioritize, preempt's victim check, bind with the
gang barrier) behind the ``Extender`` facade the HTTP handlers call.

The top of the core: may import every other layer (not ``admission``).
"""
