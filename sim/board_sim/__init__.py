"""A board top simulated on Verilator with its UART pins joined to a TCP socket: the harness
``uart_main.cpp`` and its build (:mod:`sim.board_sim.build`), so that a host talks to the
simulated design through pyserial's ``socket://`` URL as it would to a board's USB UART."""
