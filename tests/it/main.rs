//! The integration tests: one binary, one module per file, sharing
//! `support` (docs/architecture.md section 6, "A test"). One binary links
//! once and runs every test in one process, where 22 binaries linked 22
//! times. Run one file's tests with `cargo test --test it e2e::`. The one
//! exception, `tests/open_loop.rs`, says why it is a binary of its own.

mod support;

mod ci_docs;
mod compare_gate;
mod completions_man;
mod config;
mod connect;
mod deploy;
mod docs;
mod dry_run;
mod e2e;
mod fault_matrix;
mod faults;
mod fd_limits;
mod fit;
mod follow;
mod fuzz_corpus;
mod gpu;
mod help_checks;
mod interop;
mod live_split;
mod merge;
mod module_graph;
mod notes;
mod notes_audit;
mod panic_hook;
mod predict;
mod probes;
mod reasoning;
mod report;
mod resume_saved;
mod rounds;
mod schema;
mod secrets;
mod server_account;
mod shards;
mod sim_engines;
mod sim_sglang_tgi;
mod sim_timing;
mod thresholds;
mod traffic;
mod transport;
mod tui;
mod tuning;
mod tx_clock;
