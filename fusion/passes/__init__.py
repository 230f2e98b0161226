"""Graph passes: each module's ``run(graph) -> (graph, changed)`` returns a new graph.

:mod:`fusion.passes.driver` runs a list of them to a fixed point; :data:`PRUNE` and
:data:`LEGALIZE` there are the pipelines ``hwgen inspect`` (and later the compiler) uses.
"""
