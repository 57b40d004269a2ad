//! tokbench: load-test LLM inference servers and watch the result live.
//!
//! Data flows one way (DESIGN.md section 4):
//! workload -> load driver -> protocol client -> records -> stats -> analysis -> report/view.

pub mod analysis;
pub mod cli;
pub mod compare;
pub mod export;
pub mod load;
pub mod probe;
pub mod protocol;
pub mod record;
pub mod report;
pub mod run;
pub mod sim;
pub mod stats;
pub mod ui;
pub mod workload;
