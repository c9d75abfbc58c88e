"""GPUs per device: the GPU ask of a pod, whether it fits a node's devices, which devices it
gets (NVLink and NUMA aware) and the per-device ledger.

May import ``model`` only.
"""
