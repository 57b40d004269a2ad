//! Where both faces start a run, so that what happens before the first
//! request is the same whichever face the user gets: the result folder is
//! opened (an unwritable one fails before any load), the export sinks are
//! told, and only then do the driver and the server probe start.

use std::time::Instant;

use color_eyre::eyre::Result;
use tokio::sync::mpsc::UnboundedReceiver;

use super::prepare::{start_driver, start_probe, Prepared};
use crate::export::Exports;
use crate::load::driver::DriverHandle;
use crate::probe::client::{meter, LagMonitor};
use crate::probe::live::ServerSample;
use crate::report::recorder::Recorder;

/// A run under way: its books, its load and its server samples.
pub struct Running {
    pub recorder: Recorder,
    pub driver: DriverHandle,
    pub server_samples: UnboundedReceiver<ServerSample>,
    /// The run clock's origin.
    pub run_start: Instant,
}

/// Open the books and start the load. `before_load` sees the recorder
/// after it is open and before anything is sent (the live view names its
/// first series there); what it returns comes back beside the run. `live`: the driver stays after the plan, watching
/// the server for a restart (the live view's series).
pub(crate) fn start_run<T>(
    prepared: &Prepared,
    exports: &mut Exports,
    live: bool,
    before_load: impl FnOnce(&mut Recorder) -> T,
) -> Result<(Running, T)> {
    let mut recorder = Recorder::open(
        &prepared.result_dir,
        prepared.run.clone(),
        meter(LagMonitor::start()),
        prepared.prior.clone(),
    )?;
    recorder.set_steady_rule(prepared.plan.steady_completions, prepared.plan.steady_rse);
    let prepared_by_face = before_load(&mut recorder);
    exports.run_started(&prepared.export_plan(), &recorder)?;
    let run_start = Instant::now();
    let driver = start_driver(prepared, run_start, live);
    exports.attach(&driver);
    let server_samples = start_probe(prepared, run_start);
    let running = Running {
        recorder,
        driver,
        server_samples,
        run_start,
    };
    Ok((running, prepared_by_face))
}
