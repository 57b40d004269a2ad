//! Work a face asks for between two planned levels, once the first has
//! drained and before the next starts (a tune's cache reset). The driver
//! waits for it without knowing what it is; a Stop abandons it.

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::Driver;

/// What to run between two planned levels.
#[derive(Clone)]
pub struct BetweenLevels(pub Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>);

impl fmt::Debug for BetweenLevels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BetweenLevels(..)")
    }
}

/// The work's end; never, while none is out.
pub(super) async fn between_result(work: &mut Option<tokio::task::JoinHandle<()>>) {
    match work {
        Some(handle) => {
            let _ = handle.await;
        }
        None => std::future::pending().await,
    }
    *work = None;
}

impl Driver {
    /// After a planned level closed: the work between levels first, when
    /// there is any and a planned level follows; else the next level now.
    pub(super) fn next_planned_after_work(&mut self) {
        let follows = self.search.is_none()
            && self.cfg.replay.is_none()
            && self.next_plan < self.cfg.plan.len();
        match &self.cfg.between_levels {
            Some(work) if follows => {
                self.current = None;
                self.between = Some(tokio::spawn((work.0)()));
            }
            _ => self.start_next_planned(),
        }
    }

    /// A Stop: the work between levels is not waited for.
    pub(super) fn abandon_work(&mut self) {
        if let Some(handle) = self.between.take() {
            handle.abort();
        }
    }
}
