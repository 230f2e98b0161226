"""A compiled graph that means something else, for the tests of the whole-model check.

The product is not changed: :func:`moved_bias_check` wraps
:func:`fusion.runtime.whole_model.check_whole_model` so that it is handed a doctored copy of
the compiled graph (its first bias moved by 5,000) and that graph's outputs, as the run of
such a plan would give them.
"""

from __future__ import annotations

import dataclasses

from fusion.reference import executor


def moved_bias_check(real):
    """``real`` (``check_whole_model``), judging the run of the compiled graph with its first
    ``bias_add``'s bias moved by 5,000."""
    def doctored_check(imported, compiled, inputs, outputs):
        bias = next(n.inputs[1] for n in compiled.topo_order() if n.op == "bias_add")
        inits = dict(compiled.initializers)
        inits[bias] = (inits[bias] + 5000).astype(inits[bias].dtype)
        doctored = dataclasses.replace(compiled, initializers=inits)
        return real(imported, doctored, inputs, executor.run(doctored, inputs))
    return doctored_check
