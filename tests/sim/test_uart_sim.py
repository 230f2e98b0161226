"""The UART-to-TCP board simulator (sim/board_sim): a Verilog UART echo built with the harness
answers a pyserial ``socket://`` client byte for byte, and the simulator ends as its contract
says (client gone, SIGTERM, no client, bad arguments)."""

import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import serial

from sim.board_sim.build import build_uart_sim
from sim.top import BuildError

DIVISOR = 8

#: An 8N1 receiver and transmitter at DIVISOR clock cycles per bit, joined by a 16-byte FIFO:
#: every byte received is sent back plus one (mod 256).
ECHO_V = """
module uart_echo #(parameter [15:0] DIVISOR = %(divisor)d) (
    input  wire sys_clk,
    input  wire sys_rst,
    input  wire serial_rx,
    output reg  serial_tx
);
    localparam [15:0] BIT_LAST = DIVISOR - 16'd1;
    localparam [15:0] HALF_LAST = DIVISOR / 16'd2 - 16'd1;

    reg rx_meta, rx;  // serial_rx synchronised
    always @(posedge sys_clk) begin
        rx_meta <= sys_rst ? 1'b1 : serial_rx;
        rx <= sys_rst ? 1'b1 : rx_meta;
    end

    reg [7:0] fifo [0:15];
    reg [4:0] wr, rd;

    reg rx_busy;
    reg [3:0] rx_bit;
    reg [15:0] rx_cnt;
    reg [7:0] rx_shift;
    always @(posedge sys_clk) begin
        if (sys_rst) begin
            rx_busy <= 1'b0;
            wr <= 5'd0;
        end else if (!rx_busy) begin
            if (!rx) begin
                rx_busy <= 1'b1;
                rx_bit <= 4'd0;
                rx_cnt <= HALF_LAST;
            end
        end else if (rx_cnt != 16'd0) begin
            rx_cnt <= rx_cnt - 16'd1;
        end else begin
            rx_cnt <= BIT_LAST;
            if (rx_bit == 4'd0) begin
                if (rx) rx_busy <= 1'b0;  // no start bit after all
                else rx_bit <= 4'd1;
            end else if (rx_bit <= 4'd8) begin
                rx_shift <= {rx, rx_shift[7:1]};
                rx_bit <= rx_bit + 4'd1;
            end else begin
                rx_busy <= 1'b0;
                if (rx && (wr - rd) != 5'd16) begin
                    fifo[wr[3:0]] <= rx_shift + 8'd1;
                    wr <= wr + 5'd1;
                end
            end
        end
    end

    reg tx_busy;
    reg [3:0] tx_left;
    reg [15:0] tx_cnt;
    reg [8:0] tx_frame;
    always @(posedge sys_clk) begin
        if (sys_rst) begin
            serial_tx <= 1'b1;
            tx_busy <= 1'b0;
            rd <= 5'd0;
        end else if (tx_busy && tx_cnt != 16'd0) begin
            tx_cnt <= tx_cnt - 16'd1;
        end else if (tx_busy && tx_left != 4'd0) begin
            serial_tx <= tx_frame[0];
            tx_frame <= tx_frame >> 1;
            tx_left <= tx_left - 4'd1;
            tx_cnt <= BIT_LAST;
        end else if (wr != rd) begin
            // The next start bit right after the stop bit's DIVISOR cycles: a stop bit one
            // cycle longer would send slower than bytes arrive and overflow the FIFO.
            serial_tx <= 1'b0;
            tx_frame <= {1'b1, fifo[rd[3:0]]};
            tx_left <= 4'd9;
            tx_cnt <= BIT_LAST;
            rd <= rd + 5'd1;
            tx_busy <= 1'b1;
        end else begin
            tx_busy <= 1'b0;
        end
    end
endmodule
"""


@pytest.fixture(scope="module")
def echo_sim(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("uart_echo")
    source = folder / "uart_echo.v"
    source.write_text(ECHO_V % {"divisor": DIVISOR})
    return build_uart_sim([source], "uart_echo", folder / "build")


@contextmanager
def running(exe: Path, *args: str) -> Iterator[tuple[subprocess.Popen, int]]:
    """The simulator started with ``args``, and the port it listens on."""
    proc = subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        match = re.fullmatch(r"LISTENING (\d+)\n", line)
        assert match, f"first line {line!r}; stderr: {proc.stderr.read()}"
        yield proc, int(match[1])
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def cycles(stdout: str) -> int:
    """The count of the simulator's last line, ``CYCLES <n>``."""
    match = re.fullmatch(r"CYCLES (\d+)", stdout.strip().splitlines()[-1])
    assert match, f"no CYCLES line in {stdout!r}"
    return int(match[1])


@pytest.mark.parametrize("rate", [
    ("--divisor", str(DIVISOR)),
    # the same bit time as a clock and a baud rate (the path of a fractional one)
    ("--clock-hz", str(DIVISOR * 1_000_000), "--baud", "1000000"),
])
def test_echo_of_300_bytes_over_pyserial(echo_sim, rate):
    data = bytes([0x00, 0xFF, 0x55, 0xAA]) + bytes(range(256)) + bytes(range(255, 215, -1))
    assert len(data) == 300
    with running(echo_sim, *rate) as (proc, port):
        link = serial.serial_for_url(f"socket://127.0.0.1:{port}", timeout=5)
        try:
            link.write(data)
            got = link.read(len(data))
            link.timeout = 0.2  # then nothing more: one byte back per byte sent
            extra = link.read(1)
        finally:
            link.close()
        out, err = proc.communicate(timeout=10)
    assert got == bytes((b + 1) & 0xFF for b in data)
    assert extra == b""
    assert proc.returncode == 0, err
    assert "warning" not in err
    # Each byte's frame is 10 bits of DIVISOR cycles, each way.
    assert cycles(out) >= len(data) * 10 * DIVISOR


def test_exits_cleanly_when_the_client_disconnects(echo_sim):
    with running(echo_sim, "--divisor", str(DIVISOR), "--idle-timeout", "30") as (proc, port):
        link = serial.serial_for_url(f"socket://127.0.0.1:{port}", timeout=5)
        link.write(b"\x41")
        assert link.read(1) == b"\x42"
        link.close()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert err == ""
    assert cycles(out) > 0


def test_sigterm_prints_the_cycle_count(echo_sim):
    with running(echo_sim, "--divisor", str(DIVISOR)) as (proc, port):
        link = serial.serial_for_url(f"socket://127.0.0.1:{port}", timeout=5)
        link.write(b"\x07")
        assert link.read(1) == b"\x08"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        link.close()
    assert proc.returncode == 0, err
    assert cycles(out) > 0


def test_no_client_within_the_idle_timeout_is_status_3(echo_sim):
    with running(echo_sim, "--divisor", str(DIVISOR), "--idle-timeout", "1") as (proc, _):
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 3
    assert "no client connected within 1 s" in err


@pytest.mark.parametrize("args, message", [
    (["--divisor", "3"], "error: --divisor must be an integer >= 4"),
    (["--divisor", "8x"], "error: --divisor must be an integer >= 4"),
    ([], "error: --divisor (or --clock-hz with --baud) is required"),
    (["--clock-hz", "50000000"], "error: --clock-hz and --baud go together"),
    (["--clock-hz", "1000", "--baud", "300"], "error: --clock-hz must be at least 4 x --baud"),
    (["--divisor", "8", "--clock-hz", "8000", "--baud", "1000"],
     "error: give --divisor or --clock-hz with --baud, not both"),
    (["--divisor", "8", "--port", "70000"], "error: --port must be an integer in 0..65535"),
    (["--divisor", "8", "--speed", "1"], "error: unknown argument '--speed'"),
])
def test_bad_arguments_are_status_2_with_one_error_line(echo_sim, args, message):
    proc = subprocess.run([str(echo_sim), *args], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert message in proc.stderr


def test_a_verilator_error_is_a_build_error_with_the_log_tail(tmp_path):
    source = tmp_path / "broken.v"
    source.write_text("module broken(input wire sys_clk);\n  assign nowhere = ;\nendmodule\n")
    with pytest.raises(BuildError, match=r"(?s)failed \(status \d+\).*build\.log.*broken\.v"):
        build_uart_sim([source], "broken", tmp_path / "build")
