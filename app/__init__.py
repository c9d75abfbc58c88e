"""Muster: gang-, queue- and GPU-aware scheduling for AI/ML batch work on Kubernetes."""

__version__ = "0.1.0"
