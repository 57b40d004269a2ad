//! `tokbench tune`'s pure parts: the grid of server settings and the
//! command template they fill (`grid`), and which setting to keep
//! (`recommend`). No I/O: the face (`run::tune`) starts the servers.

pub(crate) mod grid;
pub(crate) mod recommend;
