//! tokbench: load-test LLM inference servers and watch the result live.
//!
//! Data flows one way (docs/architecture.md sections 1 and 2):
//! workload -> load driver -> protocol client -> records -> stats -> analysis -> report/view.

// Nothing a server or a user sent may panic the tool: no unwrap or expect
// outside tests (docs/architecture.md). The one constant-bounds case allows
// itself, with its reason. Nor a terminal that went away: no eprintln!,
// which panics on a dead stderr; `say!` (console.rs) drops the line instead.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)
)]

pub mod analysis;
pub mod cli;
pub mod compare;
pub mod config;
pub mod console;
pub mod engine;
pub mod exit;
pub mod export;
pub mod fmt;
pub mod load;
pub mod merge;
pub mod model;
pub mod probe;
pub mod protocol;
pub mod record;
pub mod redact;
pub mod report;
pub mod run;
pub mod server;
pub mod sim;
pub mod stats;
pub mod time;
pub mod tune;
pub mod ui;
pub mod workload;
