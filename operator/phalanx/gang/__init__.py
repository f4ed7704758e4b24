"""Gang placement: pure functions over Node/Pod dicts (no kopf, no kubernetes client).

- ``inventory``: exact Kubernetes quantities, NodeInfo / PodUsage, free capacity, reservations.
- ``topology``: the domain tree built from node labels and the configured levels.
- ``planner``: ``plan_gang`` / ``plan_queue`` (all-or-nothing, span-minimising, best fit).
- ``costmodel``: alpha-beta allreduce model, lower bound, ZeRO memory.
"""
