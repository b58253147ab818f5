// Subcommand registration. Each subcommand lives in its own cmd_*.cc and adds itself to the CLI11
// app; the callback it installs sets `*exit_code`. Only app/ wires modules together.
#pragma once

#include <CLI/CLI.hpp>

namespace strata::app {

void RegisterInfo(CLI::App& app, int* exit_code);        // cmd_info.cc
void RegisterSynth(CLI::App& app, int* exit_code);       // cmd_synth.cc (synth + synth-lora)
void RegisterTokenize(CLI::App& app, int* exit_code);    // cmd_tokenize.cc (tokenize + detokenize)
void RegisterGenerate(CLI::App& app, int* exit_code);    // cmd_generate.cc
void RegisterBench(CLI::App& app, int* exit_code);       // cmd_bench.cc
void RegisterServe(CLI::App& app, int* exit_code);       // cmd_serve.cc
void RegisterGateway(CLI::App& app, int* exit_code);     // cmd_gateway.cc
void RegisterDevices(CLI::App& app, int* exit_code);     // cmd_devices.cc
void RegisterUp(CLI::App& app, int* exit_code);          // cmd_up.cc (up + status)
void RegisterAutoscaler(CLI::App& app, int* exit_code);  // cmd_autoscaler.cc
void RegisterRender(CLI::App& app, int* exit_code);      // cmd_render.cc (render k8s)
void RegisterBenchServe(CLI::App* bench,
                        int* exit_code);  // cmd_bench_serve.cc (bench serve + bench sweep)
void RegisterBenchFlood(CLI::App* bench, int* exit_code);   // cmd_bench_flood.cc
void RegisterBenchMemory(CLI::App* bench, int* exit_code);  // cmd_bench_memory.cc

// The running binary's path (/proc/self/exe).
std::string SelfPath();

// Path of the bundled default model (synthesized at build time next to the binary):
// <dir of executable>/../models/strata-tiny.gguf
std::string DefaultModelPath();

}  // namespace strata::app
