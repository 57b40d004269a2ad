//! `tokbench tune`'s pure parts: the grid of server settings and the
//! command template they fill (`grid`), and which setting to keep
//! (`recommend`), and what its live view shows (`view`). No I/O: the face
//! (`run::tune`) starts the servers.

pub(crate) mod auto;
pub(crate) mod grid;
pub(crate) mod recommend;
pub mod view;
