"""Synthesis of the accelerator's gateware for ECP5 FPGAs (yosys and nextpnr-ecp5 from PyPI):
resources, the smallest part, the routed Fmax and its critical path (:mod:`synth.flow`), their
cache (:mod:`synth.cache`), and variant libraries built with them (:mod:`synth.library`).
Synthesis is not simulation: nothing here imports :mod:`sim`."""
