//! tokbench: load-test LLM inference servers and watch the result live.
//!
//! Data flows one way (DESIGN.md section 4):
//! workload -> load driver -> protocol client -> records -> stats -> analysis -> report/view.

pub mod protocol;
pub mod record;
pub mod sim;
pub mod stats;
