"""The model compiler: from a legalized graph to kernels on a variant, and running them.

=============  ================================================================================
``lower``      what each node becomes on the accelerator (kernel anchor, epilogue stage, host
               layout step) and the chains of nodes that may fuse
``kernels``    one kernel: its operands, its regions, its program (through the kernel cache)
``engine``     candidates per chain, their predicted cycles, and the cheapest cover
``memplan``    external-memory plan with liveness-based reuse; the peak
``plan``       :func:`compile_model`: the whole pipeline, and the plan folder on disk
``runtime``    :func:`run_plan`: every kernel on Verilator, shadow-checked against the
               reference executor
=============  ================================================================================
"""

from fusion.compiler.lower import CompileError

__all__ = ["CompileError"]
