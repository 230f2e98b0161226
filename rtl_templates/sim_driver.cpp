// The C++ driver of a "cxx" simulation build (sim/cxx_driver.py writes its inputs and reads
// its outputs). Compiled by sim/build.py with the Verilated model of hwgen_tb_top
// (rtl_templates/sim_top.sv.j2 rendered with harness "cxx"); do not edit a build's copy.
//
// It does what the cocotb testbench (sim/tb/harness.py) does, with no VPI and no --timing:
// it toggles clk itself and touches only the top's ports. Run in the run folder, it reads
// jobs.txt:
//
//   hwgen-jobs 1
//   job <index> <has memory file 0|1> <cycle limit> <regions>
//   region <first word> <last word>          (one line per region)
//
// For job i it renames job<i>.host.hex and job<i>.load.hex to the files the top reads
// (+hwgen_host, +hwgen_load), holds reset while it pulses load_host and load_mem, releases
// reset and raises host_go (between clock edges), and clocks until host_done
// rises: the Verilog host has played the script (program over the bus, start, wait for irq
// under its watchdog, counters read). It then dumps the host's reads and each region
// (+hwgen_dump, renamed to job<i>.reads.hex and job<i>.r<k>.hex) and appends to results.txt
//
//   job <index> <done|timeout> <run wall seconds> <load wall seconds>
//
// or, when the host is still on the bus after the cycle limit (the accelerator stopped
// answering), "hung <index> <cycles>" and exit status 3. Anything else that goes wrong
// (a missing or malformed file) is one line on stderr and exit status 2; a design that calls
// $finish ends the run with exit status 4. results.txt ends with "end" when every job ran.

#include "Vtop.h"
#include "verilated.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace {

// The exit status when the design calls $finish (the results, if any, lack "end").
constexpr int FINISHED = 4;

struct Job {
    long index = 0;
    int has_memory = 0;
    std::uint64_t limit = 0;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> regions;
};

[[noreturn]] void fail(const std::string& why) {
    std::fprintf(stderr, "hwgen sim driver: %s\n", why.c_str());
    std::exit(2);
}

std::vector<Job> read_jobs(const char* path) {
    std::ifstream in(path);
    std::string word;
    int format = 0;
    if (!(in >> word >> format) || word != "hwgen-jobs" || format != 1)
        fail(std::string(path) + " is not a job list of format 1");
    std::vector<Job> jobs;
    while (in >> word) {
        if (word == "job") {
            Job job;
            std::size_t regions = 0;
            if (!(in >> job.index >> job.has_memory >> job.limit >> regions))
                fail("a malformed job line in " + std::string(path));
            for (std::size_t k = 0; k < regions; ++k) {
                std::uint32_t lo = 0, hi = 0;
                if (!(in >> word >> lo >> hi) || word != "region")
                    fail("a malformed region line in " + std::string(path));
                job.regions.emplace_back(lo, hi);
            }
            jobs.push_back(job);
        } else {
            fail("unexpected '" + word + "' in " + std::string(path));
        }
    }
    return jobs;
}

void rename_or_fail(const std::string& from, const std::string& to) {
    if (std::rename(from.c_str(), to.c_str()) != 0) fail("cannot rename " + from + " to " + to);
}

std::string plusarg(VerilatedContext& ctx, const char* name) {
    std::string match = ctx.commandArgsPlusMatch(name);  // "+name=VALUE" or ""
    if (match.empty()) fail(std::string("the +") + name + "FILE argument is missing");
    return match.substr(std::string(name).size() + 1);
}

class Driver {
public:
    Driver(VerilatedContext& ctx, Vtop& top) : ctx_(ctx), top_(top) {}

    // A falling edge then a rising one: inputs set before it are sampled on the rising edge.
    void cycle() {
        top_.clk = 0;
        top_.eval();
        ctx_.timeInc(5);
        top_.clk = 1;
        top_.eval();
        ctx_.timeInc(5);
    }

    // A rising edge on a testbench input (its always block runs), then back to 0; no clock.
    void pulse(CData& input) {
        input = 1;
        top_.eval();
        input = 0;
        top_.eval();
    }

    VerilatedContext& ctx_;
    Vtop& top_;
};

double seconds_since(std::chrono::steady_clock::time_point began) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
}

}  // namespace

int main(int argc, char** argv) {
    auto ctx = std::make_unique<VerilatedContext>();
    ctx->commandArgs(argc, argv);
    const std::string load = plusarg(*ctx, "hwgen_load=");
    const std::string dump = plusarg(*ctx, "hwgen_dump=");
    const std::string host = plusarg(*ctx, "hwgen_host=");
    const std::vector<Job> jobs = read_jobs("jobs.txt");
    auto top = std::make_unique<Vtop>(ctx.get(), "TOP");
    Driver d(*ctx, *top);
    top->clk = 0;
    top->rst_in = 1;
    top->host_go = 0;
    top->eval();  // the initial blocks: the file names from the plusargs
    if (ctx->gotFinish()) return FINISHED;  // a design that ends itself: no results at all

    std::FILE* results = std::fopen("results.txt", "w");
    if (results == nullptr) fail("cannot write results.txt");
    for (const Job& job : jobs) {
        const std::string stem = "job" + std::to_string(job.index);
        top->host_go = 0;
        top->rst_in = 1;
        // Two cycles in reset (a third for the top's reset flip-flop): the sync reset
        // reaches the design and the memory's pipe.
        d.cycle();
        d.cycle();
        d.cycle();
        auto began = std::chrono::steady_clock::now();
        rename_or_fail(stem + ".host.hex", host);
        d.pulse(top->load_host);
        if (job.has_memory) {
            rename_or_fail(stem + ".load.hex", load);
            d.pulse(top->load_mem);
        }
        const double load_seconds = seconds_since(began);
        top->rst_in = 0;
        d.cycle();
        d.cycle();  // through the reset flip-flop
        top->host_go = 1;
        began = std::chrono::steady_clock::now();
        std::uint64_t cycles = 0;
        // The host's own watchdog ends its wait for the interrupt at the job's limit; this
        // one only catches a host left waiting on a bus that stopped answering.
        while (!top->host_done && cycles < job.limit && !ctx->gotFinish()) {
            d.cycle();
            ++cycles;
        }
        if (ctx->gotFinish()) {  // $finish in the design: the results stop short of "end"
            std::fclose(results);
            top->final();
            return FINISHED;
        }
        const double wall = seconds_since(began);
        if (!top->host_done) {
            std::fprintf(results, "hung %ld %llu\n", job.index,
                         static_cast<unsigned long long>(cycles));
            std::fclose(results);
            top->final();
            return 3;
        }
        d.pulse(top->dump_host);
        rename_or_fail(dump, stem + ".reads.hex");
        for (std::size_t k = 0; k < job.regions.size(); ++k) {
            top->dump_lo = job.regions[k].first;
            top->dump_hi = job.regions[k].second;
            d.pulse(top->dump_mem);
            rename_or_fail(dump, stem + ".r" + std::to_string(k) + ".hex");
        }
        std::fprintf(results, "job %ld %s %.6f %.6f\n", job.index,
                     top->host_timed_out ? "timeout" : "done", wall, load_seconds);
    }
    std::fprintf(results, "end\n");
    std::fclose(results);
    top->final();
    return 0;
}
