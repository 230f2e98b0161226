"""Boards: the accelerator on an FPGA board with its DRAM and a host link, and the host
runtime that drives it."""
