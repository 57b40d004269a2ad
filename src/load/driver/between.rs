//! Work a face asks for at a level's edge, once the level has drained and
//! before the next starts: the server's own account read (`LevelEdges`)
//! and a tune's cache reset (`BetweenLevels`). The driver waits for it
//! without knowing what it is; a Stop abandons it.

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{Driver, DriverEvent};
use crate::stats::server_account::Snapshot;

/// What to run between two planned levels.
#[derive(Clone)]
pub struct BetweenLevels(pub Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>);

impl fmt::Debug for BetweenLevels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BetweenLevels(..)")
    }
}

/// How to read the server's own account (None: it gave none this time).
#[derive(Clone)]
pub struct LevelEdges(pub Arc<dyn Fn() -> BoxFuture<'static, Option<Snapshot>> + Send + Sync>);

impl fmt::Debug for LevelEdges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LevelEdges(..)")
    }
}

/// The work of one edge, while it runs.
pub(super) struct Edge {
    handle: tokio::task::JoinHandle<Option<Snapshot>>,
    /// The level it closes (None: the edge before the first).
    closes: Option<usize>,
}

/// The edge's end: the level it closed and what the server said; never,
/// while none is out.
pub(super) async fn between_result(work: &mut Option<Edge>) -> (Option<usize>, Option<Snapshot>) {
    let out = match work {
        Some(edge) => (edge.closes, (&mut edge.handle).await.ok().flatten()),
        None => std::future::pending().await,
    };
    *work = None;
    out
}

impl Driver {
    /// At an edge: read the account (where the edge is `clean`: nothing in
    /// flight) and, between two planned levels, the face's work. Whether
    /// anything was started (the next level then waits for
    /// [`Driver::edge_done`]).
    pub(super) fn spawn_edge(&mut self, closes: Option<usize>, clean: bool) -> bool {
        let follows = self.search.is_none()
            && self.cfg.replay.is_none()
            && self.next_plan < self.cfg.plan.len();
        let account = self
            .cfg
            .edges
            .as_ref()
            .filter(|_| clean)
            .map(|edges| (edges.0)());
        let work = self
            .cfg
            .between_levels
            .as_ref()
            .filter(|_| follows && closes.is_some())
            .map(|work| (work.0)());
        // The closed level's probes come back first: their records then
        // precede its LevelFinished, and none is in flight while the
        // server's counters are read.
        let probes = self
            .probes
            .as_ref()
            .filter(|_| clean && closes.is_some())
            .map(|p| p.idle());
        if account.is_none() && work.is_none() && probes.is_none() {
            return false;
        }
        self.current = None;
        let handle = tokio::spawn(async move {
            if let Some(probes) = probes {
                probes.await;
            }
            // Read first: the work (a cache reset) changes nothing it reads.
            let snapshot = match account {
                Some(read) => read.await,
                None => None,
            };
            if let Some(work) = work {
                work.await;
            }
            snapshot
        });
        self.between = Some(Edge { handle, closes });
        true
    }

    /// The edge's work is done: the account goes out, then the closed
    /// level's LevelFinished, then the next level starts.
    pub(super) fn edge_done(&mut self, closes: Option<usize>, snapshot: Option<Snapshot>) {
        if let Some(snapshot) = snapshot {
            self.emit(DriverEvent::ServerAccount {
                closes,
                snapshot: Arc::new(snapshot),
            });
        }
        self.announce_finished();
        if !self.stopping {
            self.start_next_planned();
        }
    }

    /// A Stop: the edge's work is not waited for.
    pub(super) fn abandon_work(&mut self) {
        if let Some(edge) = self.between.take() {
            edge.handle.abort();
        }
    }
}
