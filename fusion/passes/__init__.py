"""Graph passes: each module's ``run(graph) -> (graph, changed)`` returns a new graph.

=====================  ======================================================================
``dce``                drop nodes and constants no output depends on
``identity``           remove identities and no-ops (same-shape reshapes, identity transposes)
``constant_fold``      evaluate initializer-only nodes with the reference executor
``qdq_fold``           fold ONNX Q/DQ and QOperator patterns into hwgen's integer ops
``conv_legalize``      ``qconv2d`` into ``im2col`` + ``qmatmul`` (GEMM form)
``layout_identity``    readers of a chain of layout ops that is an identity read its start
``im2col_rows``        an ``im2col`` of a GEMM's output reads the GEMM's rows (``spatial``)
``weight_zero_point``  weight zero points and uint8 weights folded into int8 weights, exactly
``driver``             run passes to a fixed point; :func:`~fusion.passes.driver.optimize` is
                       the default pipeline (prune, legalize, prune)
``report``             run the passes on a model and describe the result (``hwgen inspect``)
=====================  ======================================================================
"""
