//! A sweep from flags to files: validate, look at the server, start the
//! driver, feed the recorder, print. The headless face lives here; the live
//! view plugs into the same pieces.

mod cache_reset;
pub mod checks;
pub(crate) mod clock;
mod headless;
mod open_files;
mod plan;
mod prepare;
mod start;
#[cfg(test)]
mod tests;
pub(crate) mod timing;
mod tls;
mod tune;
mod tune_plan;
mod tune_predict;
mod tune_results;
mod url;
mod wrong_backend;

pub use headless::run_headless;
pub(crate) use headless::{print_results, print_thresholds};
pub use plan::SweepPlan;
pub use prepare::{prepare, Prepared};
pub(crate) use start::start_run;
pub use start::Running;
pub(crate) use tune::{run_tune, TuneFace};
pub(crate) use wrong_backend::failure_line;

pub(crate) use crate::exit::{EXIT_CHECK_FAILED, EXIT_INTERRUPTED};
pub use crate::exit::{EXIT_FAILED, EXIT_OK};

/// A value that never shows in Debug output or logs (the API key).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl Secret {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Resolves on Ctrl-C, SIGTERM or SIGHUP.
pub(crate) async fn interrupted() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        // SIGHUP is the SSH session dropping: save, as for Ctrl-C.
        if let (Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {},
                _ = term.recv() => {},
                _ = hup.recv() => {},
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// An error and its causes on one line, as main prints it.
pub fn one_line(e: &color_eyre::eyre::Report) -> String {
    e.chain()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}
