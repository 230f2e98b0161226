// Runs a board top on Verilator with its UART joined to a TCP socket on 127.0.0.1, so that a
// host (pyserial, "socket://127.0.0.1:PORT") talks to the simulated design as to a board's
// USB UART. Built by sim/board_sim/build.py with --prefix Vuart_sim, whatever the top is.
//
//   uart_sim (--divisor D | --clock-hz C --baud B) [--port P] [--reset-cycles N] [--idle-timeout S]
//     --divisor D        system clock cycles per UART bit (integer >= 4); must match the
//                        design's own divisor
//     --clock-hz C --baud B  instead: bits of C / B cycles on average (a fraction: LiteX's
//                        UART divides with a phase accumulator)
//     --port P           TCP port on 127.0.0.1; 0 (the default) lets the OS choose
//     --reset-cycles N   sys_rst is high for the first N cycles (default 16)
//     --idle-timeout S   exit with status 3 if no client connects within S seconds
//                        (default 600)
//
// The top's ports: sys_clk (in), sys_rst (in, active high), serial_rx (in, idle high: the
// design receives on it), serial_tx (out, idle high).
//
// Stdout carries two lines for the caller: "LISTENING <port>" once the socket listens, and
// "CYCLES <n>" at the end. The simulation ends, with status 0, when the client closes the
// connection, on SIGTERM or SIGINT, or when the design calls $finish. Only one client is
// served. Frames are 8N1; host bytes are sent back to back, each bit held D cycles.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "Vuart_sim.h"
#include "verilated.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;

void on_signal(int) { g_stop = 1; }

// Cycles between two looks at the socket and the stop flag: a recv() costs about a
// microsecond, which every 256 cycles is a few percent of a small design's speed.
constexpr int kBatch = 256;
// The received bytes are flushed to the socket every this many batches (1024 cycles) ...
constexpr int kFlushBatches = 4;
// ... or as soon as this many are pending.
constexpr size_t kFlushBytes = 256;
// Host bytes not yet shifted into the design; past this the socket is not read, so that TCP
// holds back a host that writes faster than the simulated UART takes its bytes.
constexpr size_t kMaxQueued = 64 * 1024;
// The host->design countdown while no frame is being sent: large enough never to run out
// between two batches, so that the per-cycle test stays a single decrement.
constexpr uint64_t kIdleCount = ~uint64_t{0} >> 1;

[[noreturn]] void fail(int status, const std::string& message) {
    std::fprintf(stderr, "error: %s\n", message.c_str());
    std::exit(status);
}

void usage(FILE* out) {
    std::fputs("usage: uart_sim (--divisor D | --clock-hz C --baud B) [--port P] [--reset-cycles N] [--idle-timeout S]\n",
               out);
}

// A decimal integer within [lo, hi]; strtoull alone accepts signs, spaces and trailing junk.
bool parse_uint(const char* text, uint64_t lo, uint64_t hi, uint64_t* out) {
    if (*text == '\0') return false;
    for (const char* p = text; *p; ++p)
        if (*p < '0' || *p > '9') return false;
    errno = 0;
    unsigned long long value = std::strtoull(text, nullptr, 10);
    if (errno != 0 || value < lo || value > hi) return false;
    *out = value;
    return true;
}

struct Options {
    uint64_t port = 0;
    uint64_t divisor = 0;  // 0: not given
    uint64_t clock_hz = 0;  // with baud: a bit of clock_hz / baud cycles, not a whole number
    uint64_t baud = 0;
    uint64_t reset_cycles = 16;
    uint64_t idle_timeout = 600;
};

Options parse_args(int argc, char** argv) {
    Options opts;
    struct Spec {
        const char* name;
        uint64_t* value;
        uint64_t lo, hi;
        const char* what;
    } specs[] = {
        {"--port", &opts.port, 0, 65535, "an integer in 0..65535"},
        {"--divisor", &opts.divisor, 4, 1u << 30, "an integer >= 4"},
        {"--reset-cycles", &opts.reset_cycles, 0, ~uint64_t{0} >> 1, "an integer >= 0"},
        {"--idle-timeout", &opts.idle_timeout, 1, 1u << 30, "an integer >= 1 (seconds)"},
        {"--clock-hz", &opts.clock_hz, 1, ~uint64_t{0} >> 20, "an integer >= 1"},
        {"--baud", &opts.baud, 1, ~uint64_t{0} >> 20, "an integer >= 1"},
    };
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") {
            usage(stdout);
            std::exit(0);
        }
        if (arg.rfind("+", 0) == 0) continue;  // +plusargs are the design's ($test$plusargs)
        std::string name = arg, text;
        bool have_text = false;
        if (size_t eq = arg.find('='); eq != std::string::npos) {
            name = arg.substr(0, eq);
            text = arg.substr(eq + 1);
            have_text = true;
        }
        Spec* spec = nullptr;
        for (Spec& s : specs)
            if (name == s.name) spec = &s;
        if (spec == nullptr) {
            usage(stderr);
            fail(2, "unknown argument '" + arg + "'");
        }
        if (!have_text) {
            if (i + 1 >= argc) fail(2, name + " needs a value");
            text = argv[++i];
        }
        if (!parse_uint(text.c_str(), spec->lo, spec->hi, spec->value))
            fail(2, name + " must be " + spec->what);
    }
    if ((opts.clock_hz == 0) != (opts.baud == 0))
        fail(2, "--clock-hz and --baud go together");
    if (opts.clock_hz != 0) {
        if (opts.divisor != 0) fail(2, "give --divisor or --clock-hz with --baud, not both");
        if (opts.clock_hz < 4 * opts.baud) fail(2, "--clock-hz must be at least 4 x --baud");
    } else if (opts.divisor == 0) {
        usage(stderr);
        fail(2, "--divisor (or --clock-hz with --baud) is required (system clock cycles per "
                "UART bit)");
    }
    return opts;
}

// Listens on 127.0.0.1:port; returns the socket and the port it got.
int listen_on(uint16_t port, uint16_t* bound) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail(1, std::string("socket: ") + std::strerror(errno));
    // A fixed port can be reused at once after an earlier run's connection in TIME_WAIT.
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        fail(1, "cannot listen on 127.0.0.1:" + std::to_string(port) + ": " +
                    std::strerror(errno));
    if (::listen(fd, 1) != 0) fail(1, std::string("listen: ") + std::strerror(errno));
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    *bound = ntohs(addr.sin_port);
    return fd;
}

// Waits up to timeout_s for one client; -1 if a signal asked us to stop first.
int accept_one(int listen_fd, uint64_t timeout_s) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::seconds(timeout_s);
    for (;;) {
        if (g_stop) return -1;
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
        if (left.count() <= 0)
            fail(3, "no client connected within " + std::to_string(timeout_s) +
                        " s (--idle-timeout)");
        pollfd p{listen_fd, POLLIN, 0};
        // At most a second per poll: SA_RESTART is off, but a signal can still land between
        // the g_stop test and poll().
        int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
        if (n < 0 && errno != EINTR) fail(1, std::string("poll: ") + std::strerror(errno));
        if (n <= 0) continue;
        int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) return fd;
        if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN)
            fail(1, std::string("accept: ") + std::strerror(errno));
    }
}

// The client's socket: bytes from the host waiting to be shifted into the design, bytes from
// the design waiting to be sent. Neither direction ever blocks the simulation.
struct Link {
    int fd;
    std::deque<uint8_t> to_design;
    std::vector<uint8_t> to_host;
    size_t sent = 0;  // of to_host
    bool closed = false;

    // Reads what the host sent; false once the host has closed the connection.
    bool receive() {
        if (to_design.size() >= kMaxQueued) return true;
        uint8_t buf[4096];
        ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            to_design.insert(to_design.end(), buf, buf + n);
            return true;
        }
        if (n == 0) return false;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
        if (errno == ECONNRESET) return false;
        fail(1, std::string("recv: ") + std::strerror(errno));
    }

    // Sends what the socket takes now; the rest waits for the next flush.
    void flush() {
        while (sent < to_host.size() && !closed) {
            ssize_t n = ::send(fd, to_host.data() + sent, to_host.size() - sent,
                               MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0) {
                sent += static_cast<size_t>(n);
            } else if (n < 0 && errno == EINTR) {
                continue;
            } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                break;  // the host is not reading: keep the bytes, keep simulating
            } else {
                closed = true;  // the host is gone; receive() reports it next
            }
        }
        if (sent == to_host.size() || closed) {
            to_host.clear();
            sent = 0;
        } else if (sent >= 64 * 1024) {
            to_host.erase(to_host.begin(), to_host.begin() + static_cast<std::ptrdiff_t>(sent));
            sent = 0;
        }
    }

    // At the end: gives a host that only shut down its sending side up to a second to take
    // the last bytes.
    void drain() {
        using clock = std::chrono::steady_clock;
        const auto deadline = clock::now() + std::chrono::seconds(1);
        while (!closed && sent < to_host.size() && clock::now() < deadline) {
            pollfd p{fd, POLLOUT, 0};
            if (::poll(&p, 1, 100) > 0) flush();
        }
    }
};

}  // namespace

int main(int argc, char** argv) {
    const Options opts = parse_args(argc, argv);
    // A bit lasts clock_hz / baud cycles, in 1/65536ths of a cycle: a UART whose divider is a
    // phase accumulator (LiteX's) keeps that average, each bit a whole number of cycles.
    const uint64_t period_fx = opts.clock_hz != 0 ? (opts.clock_hz << 16) / opts.baud
                                                  : opts.divisor << 16;
    const uint64_t half = period_fx >> 17;
    uint64_t drive_phase = 0, sample_phase = 0;
    auto drive_bit = [&]() {
        drive_phase += period_fx;
        const uint64_t n = drive_phase >> 16;
        drive_phase &= 0xffff;
        return n;
    };
    auto sample_bit_cycles = [&]() {
        sample_phase += period_fx;
        const uint64_t n = sample_phase >> 16;
        sample_phase &= 0xffff;
        return n;
    };

    // No SA_RESTART: a signal interrupts the accept poll at once.
    struct sigaction sa{};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);

    uint16_t port = 0;
    int listen_fd = listen_on(static_cast<uint16_t>(opts.port), &port);
    std::printf("LISTENING %u\n", static_cast<unsigned>(port));
    std::fflush(stdout);
    int fd = accept_one(listen_fd, opts.idle_timeout);
    ::close(listen_fd);
    if (fd < 0) {
        std::printf("CYCLES 0\n");
        return 0;
    }
    // The host waits for each reply of a request/response protocol (Wishbone reads): Nagle's
    // algorithm would hold a short reply back until the host's delayed ACK, some 40 ms.
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Link link{fd};

    auto context = std::make_unique<VerilatedContext>();
    context->commandArgs(argc, argv);
    auto top = std::make_unique<Vuart_sim>(context.get(), "TOP");
    uint64_t cycles = 0;

    top->sys_clk = 0;
    top->sys_rst = 1;
    top->serial_rx = 1;
    for (uint64_t i = 0; i < opts.reset_cycles && !g_stop; ++i) {
        top->sys_clk = 0;
        top->eval();
        top->sys_clk = 1;
        top->eval();
        ++cycles;
    }
    top->sys_rst = 0;

    // Host -> design: the frame being shifted out on serial_rx (LSB first), its bits left,
    // the cycles until the next bit, and whether the line is idle between frames.
    uint32_t drive_frame = 0;
    int drive_bits = 0;
    uint64_t drive_count = kIdleCount;
    bool drive_idle = true;
    // Design -> host: the cycles until the next sample of serial_tx (0: waiting for a start
    // bit), which bit comes next (0 start .. 9 stop), the byte so far, the line's last level.
    uint64_t sample_count = 0;
    int sample_bit = 0;
    uint32_t sample_byte = 0;
    uint8_t prev_tx = top->serial_tx;  // a line low out of reset is no start bit
    bool framing_warned = false;

    for (uint64_t batch = 1;; ++batch) {
        for (int i = 0; i < kBatch; ++i) {
            top->sys_clk = 0;
            top->eval();
            top->sys_clk = 1;
            top->eval();

            if (--drive_count == 0) {
                if (drive_bits > 0) {
                    top->serial_rx = drive_frame & 1;
                    drive_frame >>= 1;
                    --drive_bits;
                    drive_count = drive_bit();
                } else if (!link.to_design.empty()) {
                    // Stop bit (1), 8 data bits, start bit (0) in the LSB, which goes now.
                    drive_frame = (1u << 8) | link.to_design.front();
                    link.to_design.pop_front();
                    drive_bits = 9;
                    top->serial_rx = 0;
                    drive_phase = 0;
                    drive_count = drive_bit();
                } else {
                    drive_count = kIdleCount;  // the line stays high after the stop bit
                    drive_idle = true;
                }
            }

            if (sample_count == 0) {
                const uint8_t tx = top->serial_tx;
                if (prev_tx && !tx) {
                    sample_count = half;
                    sample_phase = period_fx >> 1 & 0xffff;
                    sample_bit = 0;
                }
                prev_tx = tx;
            } else if (--sample_count == 0) {
                const uint8_t tx = top->serial_tx;
                if (sample_bit == 0) {
                    if (tx) {
                        prev_tx = 1;  // a glitch, not a start bit: wait for the next edge
                    } else {
                        sample_bit = 1;
                        sample_byte = 0;
                        sample_count = sample_bit_cycles();
                    }
                } else if (sample_bit <= 8) {
                    sample_byte |= static_cast<uint32_t>(tx & 1) << (sample_bit - 1);
                    ++sample_bit;
                    sample_count = sample_bit_cycles();
                } else {
                    if (tx) {
                        link.to_host.push_back(static_cast<uint8_t>(sample_byte));
                        if (link.to_host.size() - link.sent >= kFlushBytes) link.flush();
                    } else if (!framing_warned) {
                        std::fprintf(stderr,
                                     "warning: framing error on serial_tx at cycle %llu (stop "
                                     "bit low); byte 0x%02x dropped, later errors not reported\n",
                                     static_cast<unsigned long long>(cycles + i + 1),
                                     static_cast<unsigned>(sample_byte));
                        framing_warned = true;
                    }
                    // After a low stop bit the line must go high before a start bit counts.
                    prev_tx = tx;
                }
            }
        }
        cycles += kBatch;

        if (g_stop || context->gotFinish()) break;
        if (!link.receive()) break;
        if (drive_idle && !link.to_design.empty()) {
            drive_idle = false;
            drive_count = 1;  // the next cycle starts a frame
        }
        if (batch % kFlushBatches == 0) link.flush();
    }

    link.flush();
    link.drain();
    top->final();
    ::close(fd);
    std::printf("CYCLES %llu\n", static_cast<unsigned long long>(cycles));
    std::fflush(stdout);
    return 0;
}
