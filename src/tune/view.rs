//! What a tune shows and hears in its live view, as plain data: the tune
//! (`run::tune`) words it, the view (`ui::tune`) draws it and reports keys.

/// What a tune shows beside the run of its current setting: where it is,
/// each setting's result so far and the recommendation as it firms up.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TuneView {
    /// `setting 2/3 np=2 · starting server 14 s`, then `· ready in 3.1 s`.
    pub line: String,
    /// The server log's last line while it starts.
    pub log_line: Option<String>,
    /// One line per setting: `np=1: capacity 1 · 91 tok/s · ready 0.3 s`.
    pub rows: Vec<String>,
    /// `keep np=4: ...` over the settings finished so far.
    pub recommendation: Option<String>,
}

/// A key pressed while a server starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartKey {
    /// `n`: this setting is skipped.
    Skip,
    /// `q` (or Ctrl-C): the tune stops.
    Quit,
}

/// How one setting's run in the live view ended.
#[derive(Clone, Debug, PartialEq)]
pub enum ViewEnd {
    /// Its plan ran out.
    Finished,
    /// `n`: saved as partial; the tune goes on.
    Skipped,
    /// `q`: saved; the tune stops.
    Quit,
    /// Ctrl-C, SIGTERM or SIGHUP, or the terminal went away: saved.
    Signal,
    /// The tune's watch stopped it (the server died): saved as partial.
    StoppedBy(String),
    /// The run could not go on.
    Failed(String),
}
