// Drives the LiteDRAM native port of hwgen_dram (sim/dram/generate.py) with one access
// pattern and counts cycles; prints one JSON object. Built by sim/dram/characterize.py with
// DATA_WIDTH defined (the port word's bits).
//
//   dram_bench MODE COUNT STRIDE ADDRESS_BITS [BASE [READ_BASE]]
//     MODE   read   COUNT reads at BASE + i*STRIDE (wrapping), as fast as the port takes them
//            write  COUNT writes there, then COUNT reads at READ_BASE + i*STRIDE (BASE by
//                   default), each checked against the data written to its address (the
//                   count of mismatches is "errors"; a shifted READ_BASE shows it counts)
//            rw     COUNT pairs on one port: write a word, then read it back at once (checked:
//                   read-after-write order), the next pair at the next address
//     STRIDE in port words: 1 is sequential; 1 << row_lsb puts each access in a new row of
//            the same bank
//
// Write data waits in a FIFO filled when the write command is accepted: the crossbar raises
// wdata.ready some cycles later and takes whatever the bus holds then.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>

#include "Vhwgen_dram.h"
#include "verilated.h"

#ifndef DATA_WIDTH
#error "define DATA_WIDTH"
#endif
static const int WORDS32 = (DATA_WIDTH + 31) / 32;

// The expected content of a port word: a hash of its address and the 32-bit lane.
static uint32_t pattern(uint64_t addr, int lane) {
    uint64_t x = addr * 0x9E3779B97F4A7C15ull + (uint64_t)lane * 0xBF58476D1CE4E5B9ull + 1;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    return (uint32_t)(x >> 32);
}

static uint32_t lane_mask(int lane) {
    int bits = DATA_WIDTH - 32 * lane;
    return bits >= 32 ? 0xFFFFFFFFu : ((1u << bits) - 1);
}

#if DATA_WIDTH > 64
static void put_data(Vhwgen_dram* top, uint64_t addr) {
    for (int i = 0; i < WORDS32; i++) top->port_wdata_data[i] = pattern(addr, i);
}
static bool data_ok(Vhwgen_dram* top, uint64_t addr) {
    for (int i = 0; i < WORDS32; i++)
        if (top->port_rdata_data[i] != pattern(addr, i)) return false;
    return true;
}
#else
static void put_data(Vhwgen_dram* top, uint64_t addr) {
    uint64_t v = 0;
    for (int i = 0; i < WORDS32; i++) v |= (uint64_t)(pattern(addr, i) & lane_mask(i)) << (32 * i);
    top->port_wdata_data = v;
}
static bool data_ok(Vhwgen_dram* top, uint64_t addr) {
    uint64_t v = top->port_rdata_data, want = 0;
    for (int i = 0; i < WORDS32; i++)
        want |= (uint64_t)(pattern(addr, i) & lane_mask(i)) << (32 * i);
    return v == want;
}
#endif

// The byte enables are one bit a byte: at most 64 bits for the widths LiteDRAM gives.
static_assert(DATA_WIDTH / 8 < 64, "byte enables wider than 63 bits");
static void all_bytes(Vhwgen_dram* top) { top->port_wdata_we = (1ull << (DATA_WIDTH / 8)) - 1; }

struct Counts {
    uint64_t cycles = 0;         // first command offered .. last data (or write) done
    uint64_t commands = 0;       // commands accepted
    uint64_t cmd_refused = 0;    // cycles a command was offered and not accepted
    uint64_t latency_sum = 0;    // read command accepted -> its data, summed
    uint64_t latency_max = 0;
    uint64_t refresh_cycles = 0; // cycles refresh_active was high
    uint64_t refreshes = 0;      // rising edges of refresh_active
    uint64_t errors = 0;         // reads whose data was not what was written
    uint64_t reads_max = 0;      // most reads outstanding (accepted, data not back) at once
    uint64_t wdata_max = 0;      // most write data waiting (command accepted, data not taken)
};

struct Bench {
    std::unique_ptr<VerilatedContext> ctx;
    std::unique_ptr<Vhwgen_dram> top;
    uint64_t now = 0;
    bool refresh_was = false;

    Bench(int argc, char** argv) : ctx(new VerilatedContext) {
        ctx->commandArgs(argc, argv);
        top.reset(new Vhwgen_dram(ctx.get()));
        top->port_rdata_ready = 1;
        all_bytes(top.get());
        top->sys_rst = 1;
        for (int i = 0; i < 8; i++) tick_only();
        top->sys_rst = 0;
    }
    void tick_only() {
        top->sys_clk = 0;
        top->eval();
        top->sys_clk = 1;
        top->eval();
        now++;
    }

    // One pass of COUNT commands (reads or writes) at base + i*stride, wrapping.
    // kind: 0 reads, 1 writes, 2 write/read pairs of the same word (count commands in all).
    Counts pass(int kind, uint64_t count, uint64_t stride, uint64_t base, uint64_t words,
                bool check) {
        Counts c;
        std::deque<uint64_t> wfifo;              // addresses whose data is still to send
        std::deque<std::pair<uint64_t, uint64_t>> pending;  // (address, accepted at)
        uint64_t issued = 0, done = 0, start = now;
        while (done < count) {
            uint64_t step = kind == 2 ? issued / 2 : issued;
            bool write = kind == 1 || (kind == 2 && issued % 2 == 0);
            uint64_t addr = (base + step * stride) & (words - 1);
            top->port_cmd_valid = issued < count;
            top->port_cmd_we = write;
            top->port_cmd_addr = addr;
            // Only a width converter reads it: the end of a run of commands to merge.
            top->port_cmd_last = issued + 1 == count;
            top->port_wdata_valid = !wfifo.empty();
            if (!wfifo.empty()) put_data(top.get(), wfifo.front());
            top->sys_clk = 0;
            top->eval();  // the port's ready and valid outputs for this cycle
            bool cmd_fire = top->port_cmd_valid && top->port_cmd_ready;
            bool w_fire = top->port_wdata_valid && top->port_wdata_ready;
            bool r_fire = top->port_rdata_valid;
            bool refresh = top->refresh_active;
            if (r_fire) {
                if (pending.empty()) {
                    std::fprintf(stderr, "read data with no read outstanding at %llu\n",
                                 (unsigned long long)now);
                    std::exit(3);
                }
                uint64_t lat = now - pending.front().second;
                c.latency_sum += lat;
                if (lat > c.latency_max) c.latency_max = lat;
                if (check && !data_ok(top.get(), pending.front().first)) c.errors++;
                pending.pop_front();
                done++;
            }
            if (w_fire) {
                wfifo.pop_front();
                done++;
            }
            if (top->port_cmd_valid && !top->port_cmd_ready) c.cmd_refused++;
            if (refresh) c.refresh_cycles++;
            if (refresh && !refresh_was) c.refreshes++;
            refresh_was = refresh;
            top->sys_clk = 1;
            top->eval();
            now++;
            if (cmd_fire) {
                if (write) wfifo.push_back(addr);
                else pending.emplace_back(addr, now - 1);
                issued++;
                c.commands++;
            }
            if (pending.size() > c.reads_max) c.reads_max = pending.size();
            if (wfifo.size() > c.wdata_max) c.wdata_max = wfifo.size();
            if (now - start > 1000000ull + 1000ull * count) {
                std::fprintf(stderr, "timed out after %llu cycles (%llu of %llu done)\n",
                             (unsigned long long)(now - start), (unsigned long long)done,
                             (unsigned long long)count);
                std::exit(4);
            }
        }
        c.cycles = now - start;
        return c;
    }
};

static void print(const char* name, const Counts& c, bool last) {
    std::printf("\"%s\": {\"cycles\": %llu, \"commands\": %llu, \"cmd_refused\": %llu, "
                "\"latency_sum\": %llu, \"latency_max\": %llu, \"refresh_cycles\": %llu, "
                "\"refreshes\": %llu, \"errors\": %llu, \"reads_max\": %llu, "
                "\"wdata_max\": %llu}%s",
                name, (unsigned long long)c.cycles, (unsigned long long)c.commands,
                (unsigned long long)c.cmd_refused, (unsigned long long)c.latency_sum,
                (unsigned long long)c.latency_max, (unsigned long long)c.refresh_cycles,
                (unsigned long long)c.refreshes, (unsigned long long)c.errors,
                (unsigned long long)c.reads_max, (unsigned long long)c.wdata_max,
                last ? "" : ", ");
}

int main(int argc, char** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: %s read|write|rw COUNT STRIDE ADDRESS_BITS "
                             "[BASE [READ_BASE]]\n", argv[0]);
        return 2;
    }
    bool write = std::strcmp(argv[1], "write") == 0;
    bool rw = std::strcmp(argv[1], "rw") == 0;
    if (!write && !rw && std::strcmp(argv[1], "read") != 0) {
        std::fprintf(stderr, "mode must be read, write or rw, not %s\n", argv[1]);
        return 2;
    }
    uint64_t count = std::strtoull(argv[2], nullptr, 0);
    uint64_t stride = std::strtoull(argv[3], nullptr, 0);
    uint64_t words = 1ull << std::strtoull(argv[4], nullptr, 0);
    uint64_t base = argc > 5 ? std::strtoull(argv[5], nullptr, 0) : 0;
    uint64_t read_base = argc > 6 ? std::strtoull(argv[6], nullptr, 0) : base;
    Bench bench(argc, argv);
    std::printf("{");
    if (write) {
        Counts w = bench.pass(1, count, stride, base, words, false);
        Counts r = bench.pass(0, count, stride, read_base, words, true);
        print("write", w, false);
        print("read", r, false);
    } else if (rw) {
        print("rw", bench.pass(2, 2 * count, stride, base, words, true), false);
    } else {
        print("read", bench.pass(0, count, stride, base, words, false), false);
    }
    std::printf("\"total_cycles\": %llu}\n", (unsigned long long)bench.now);
    bench.top->final();
    return 0;
}
