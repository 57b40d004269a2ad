//! The driver's one seam to the network: whatever sends a request and times
//! it, and whatever asks the server whether it is there.
//!
//! The driver decides *when* and *what* to send; an [`Executor`] does the
//! sending. The real one ([`HttpExecutor`]) goes through
//! [`super::request::execute_counted`]; tests give the driver a scripted
//! server instead and run its whole state machine on tokio's paused clock,
//! with no socket and no wall-clock time (`src/load/driver_tests.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::driver::{MarksReader, ServerMarks};
use super::request::{execute_counted, PreparedRequest, Target};
use crate::record::RequestRecord;

/// A future an executor hands back; `'static` so the driver can spawn it.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Sends the driver's requests and answers its questions about the server.
pub(crate) trait Executor: Send + Sync + 'static {
    /// Send one request and time it; the record's offsets count from
    /// `run_start`. When `cancel` turns true the request ends at once as
    /// `Outcome::Cancelled`. `streaming` counts the request from its first
    /// output chunk until it ends, however it ends.
    fn execute(
        &self,
        request: PreparedRequest,
        run_start: Instant,
        cancel: watch::Receiver<bool>,
        streaming: Arc<AtomicU32>,
    ) -> BoxFuture<RequestRecord>;

    /// Whether anything answers at the server's root: the driver's watch on
    /// a server that went away (a restart with a new setting).
    fn server_answers(&self) -> BoxFuture<bool>;

    /// The server's identity and start marks, to tell a restart from a
    /// burst of dropped connections; None when it has none to read.
    fn server_marks(&self) -> BoxFuture<Option<ServerMarks>>;
}

/// The executor of a real run: HTTP to `target`.
pub(crate) struct HttpExecutor {
    target: Arc<Target>,
    /// The probe's reader of the server's marks, given by the face that
    /// watches the server (`load` cannot import `probe`).
    marks: Option<MarksReader>,
}

impl HttpExecutor {
    pub(crate) fn new(target: Arc<Target>, marks: Option<MarksReader>) -> HttpExecutor {
        HttpExecutor { target, marks }
    }
}

impl Executor for HttpExecutor {
    fn execute(
        &self,
        request: PreparedRequest,
        run_start: Instant,
        cancel: watch::Receiver<bool>,
        streaming: Arc<AtomicU32>,
    ) -> BoxFuture<RequestRecord> {
        let target = self.target.clone();
        Box::pin(async move {
            execute_counted(&target, request, run_start, cancel, Some(&streaming)).await
        })
    }

    fn server_answers(&self) -> BoxFuture<bool> {
        let client = self.target.client.clone();
        let mut root = self.target.url.clone();
        root.set_path("/");
        root.set_query(None);
        Box::pin(async move {
            let answer = client
                .get(root)
                .timeout(Duration::from_secs(1))
                .send()
                .await;
            // Any HTTP answer, even a 404, means something listens.
            answer.is_ok()
        })
    }

    fn server_marks(&self) -> BoxFuture<Option<ServerMarks>> {
        match &self.marks {
            Some(read) => read(),
            None => Box::pin(async { None }),
        }
    }
}
