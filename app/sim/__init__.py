"""Muster's simulator: generated gang workloads through a model of kube-scheduler.

``workload`` generates jobs and nodes, ``clock`` keeps simulated time, ``kubescheduler``
models kube-scheduler's queue and loop, ``policies`` plugs in what runs per attempt (Muster's
real extender, planner and bind barrier, or plain kube-scheduler), ``engine`` runs jobs and
measures, ``bounds`` gives scheduler-free yardsticks and ``report`` prints and plots.

Pure Python (numpy; matplotlib only for plots, imported lazily).
"""
