"""The DRAM platforms' memory (LiteDRAM) on its own: its Verilog (:mod:`sim.dram.generate`),
a Verilator build with a C++ port driver (:mod:`sim.dram.build`), and the measured figures of
its native port (:mod:`sim.dram.characterize`)."""
