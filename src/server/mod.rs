//! The server process `tokbench tune` starts: start it, wait until it is
//! ready, stop it, keep its log, and leave no process of it behind.
//!
//! - It runs in a process group of its own, so one signal reaches the server
//!   and everything it forks (vLLM's API server and its engine cores, a
//!   shell's children), and `kill(-pgid, 0)` says whether any of it is left.
//! - On Linux it gets `PR_SET_PDEATHSIG`, so the leader is told to go even
//!   when tokbench is SIGKILLed and runs no Drop.
//! - Every live group is in a process-wide registry, which [`kill_all`] (the
//!   panic hook, the last-resort exit) kills without waiting on a lock.
//! - On Linux tokbench becomes a child subreaper: the group's orphans (a
//!   shell's background job) are reparented to tokbench, not to PID 1, so
//!   `stop` reaps them and can tell that the group is gone. In a container
//!   whose PID 1 reaps nothing they would otherwise stay zombies, which
//!   `kill(-pgid, 0)` still finds.

// `tokbench tune`, which drives this module, is written beside it; until it
// lands, the library itself calls none of this (nor its re-exports).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, Once, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use color_eyre::eyre::{eyre, Report, Result, WrapErr};

mod hint;
mod ready;

pub(crate) use hint::{split_words, EngineHint};

/// What to start.
pub(crate) struct ServerSpec {
    /// The command's words, already filled from the template. With `shell`, `words` is one string run by `sh -c`.
    pub words: Vec<String>,
    pub shell: bool,
    /// Extra environment for the server (templated already). Values may be secrets: never print or log them.
    pub env: Vec<(String, String)>,
    /// stdout and stderr both go here (created/truncated).
    pub log_path: PathBuf,
    /// The loopback port it must listen on (127.0.0.1).
    pub port: u16,
}

/// A started server: its leader process and its process group.
pub(crate) struct ServerProcess {
    child: Child,
    /// The group's id, the leader's pid; always above 1, so `kill(-pgid)`
    /// can never mean "every process" (-1) or "tokbench's own group" (0).
    pgid: i32,
    log_path: PathBuf,
    started: Instant,
    port: u16,
    hint: EngineHint,
    /// The environment's values long enough to be secrets, blanked from a
    /// log line an error quotes (a server may echo its key at start-up).
    secrets: Vec<String>,
    /// Still in the registry: Drop kills the group.
    registered: bool,
}

/// A shorter environment value is a setting (`CUDA_VISIBLE_DEVICES=1`), not
/// a secret; blanking it would blank every `1` of the line.
const SECRET_MIN_LEN: usize = 8;
/// How long `stop` waits after SIGKILL: the leader goes at once unless it
/// is stuck in the kernel (a GPU driver call).
const KILL_WAIT: Duration = Duration::from_secs(10);
/// How long `stop` waits for the port to stop accepting.
const PORT_WAIT: Duration = Duration::from_secs(10);
/// How long Drop (synchronous, on an error path) waits for the group to go.
const DROP_WAIT: Duration = Duration::from_secs(2);
/// How much of the log's end `log_tail` reads: a last line is shorter.
const TAIL_BYTES: u64 = 64 * 1024;
const TAIL_CHARS: usize = 200;

/// The process groups started and not yet stopped.
static GROUPS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

fn register(pgid: i32) {
    GROUPS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(pgid);
}

fn unregister(pgid: i32) {
    GROUPS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|&g| g != pgid);
}

/// SIGKILL every registered group now (for a panic hook and the last-resort
/// exit path). It allocates nothing and never blocks on the registry's lock:
/// the panicking thread may be the one holding it.
pub(crate) fn kill_all() {
    // A holder only pushes or removes one number, so a few tries find it free.
    for _ in 0..1000 {
        match GROUPS.try_lock() {
            Ok(groups) => return kill_groups(&groups),
            Err(TryLockError::Poisoned(p)) => return kill_groups(&p.into_inner()),
            Err(TryLockError::WouldBlock) => std::thread::yield_now(),
        }
    }
}

fn kill_groups(groups: &[i32]) {
    for &pgid in groups {
        signal_group(pgid, libc::SIGKILL);
    }
}

/// Install a panic hook that calls [`kill_all`] and then the hook that was
/// there before (the terminal's restore, the default report). Idempotent.
pub(crate) fn install_panic_guard() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            kill_all();
            previous(info);
        }));
    });
}

/// A free loopback port: bound at port 0, read, let go. Another process may
/// take it before the server does; `start` then refuses it.
pub(crate) fn free_loopback_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .wrap_err("cannot bind a loopback port to find a free one")?;
    let addr = listener
        .local_addr()
        .wrap_err("cannot read the loopback port bound")?;
    Ok(addr.port())
}

fn signal_group(pgid: i32, signal: libc::c_int) {
    if pgid > 1 {
        // SAFETY: kill(2) has no memory effects; pgid > 1 keeps it to one group.
        unsafe { libc::kill(-pgid, signal) };
    }
}

/// Whether any process of the group is left (a zombie counts).
fn group_alive(pgid: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: signal 0 only checks that the group exists.
    let rc = unsafe { libc::kill(-pgid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Reap the group's members that are tokbench's children (its orphans, with
/// the subreaper). Only once the leader is reaped through its `Child`: this
/// would otherwise take the leader's status from it.
fn reap_group(pgid: i32) {
    if pgid <= 1 {
        return;
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only `status`.
        let rc = unsafe { libc::waitpid(-pgid, &mut status, libc::WNOHANG) };
        if rc <= 0 {
            return;
        }
    }
}

/// Orphans of the servers' groups come to tokbench rather than PID 1.
#[cfg(target_os = "linux")]
fn become_subreaper() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with integer arguments only. A failure leaves
        // orphans to PID 1, as without it.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
    });
}

#[cfg(not(target_os = "linux"))]
fn become_subreaper() {}

/// The leader gets SIGTERM when tokbench dies, even by SIGKILL.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    // `as`: a pid fits a pid_t; std hands it out as u32.
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (prctl, getppid), allocating nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // tokbench died between the fork and the prctl: the signal it
            // would have sent is already missed, so do not start at all.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        })
    };
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_: &mut Command) {}

/// "exited with status 1" / "killed by signal 9".
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "exited".to_owned(),
    }
}

/// An io error's words without " (os error 2)".
fn io_words(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(cut) => text[..cut].to_owned(),
        None => text,
    }
}

/// A duration as the user typed it: "600", "1.5".
fn secs_text(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}

/// Something accepts connections on the loopback port.
fn port_accepts(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}

/// The program's name for messages, and the command to spawn.
fn command(spec: &ServerSpec) -> Result<(String, Command)> {
    if spec.shell {
        let line = spec.words.join(" ");
        if line.trim().is_empty() {
            return Err(eyre!("the server command is empty"));
        }
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(line);
        return Ok(("sh".to_owned(), cmd));
    }
    let Some((program, args)) = spec.words.split_first() else {
        return Err(eyre!("the server command is empty"));
    };
    let mut cmd = Command::new(program);
    cmd.args(args);
    Ok((program.clone(), cmd))
}

/// A server log's last line, read from its file, secrets blanked.
#[derive(Clone, Debug)]
pub(crate) struct LogTail {
    path: PathBuf,
    secrets: Vec<String>,
}

impl LogTail {
    /// As [`ServerProcess::log_tail`].
    pub(crate) fn line(&self) -> Option<String> {
        let line = last_line(&self.path)?;
        Some(
            self.secrets
                .iter()
                .fold(line, |line, secret| crate::redact::key_in(&line, secret)),
        )
    }
}

impl ServerProcess {
    /// Refuses (one line: "port 127.0.0.1:N is already in use: another server is listening there; stop it or choose --serve-port") when something already accepts connections on the port, BEFORE spawning. Spawns in its own process group (`process_group(0)`), stdin null, stdout+stderr to the log, and on Linux `prctl(PR_SET_PDEATHSIG, SIGTERM)` in pre_exec so it dies if tokbench is SIGKILLed. Registers its pgid in a process-wide registry. A program not found gives "cannot start the server command `prog`: No such file or directory" style one line.
    ///
    /// The death signal comes when the *thread* that spawned the server
    /// ends, not the process: call this from a thread that lives as long as
    /// the server (a runtime's worker or the main thread), never from
    /// `spawn_blocking`, whose threads end when idle.
    pub(crate) fn start(spec: &ServerSpec) -> Result<ServerProcess> {
        if port_accepts(spec.port) {
            return Err(eyre!(
                "port 127.0.0.1:{} is already in use: another server is listening there; \
                 stop it or choose --serve-port",
                spec.port
            ));
        }
        let (program, mut cmd) = command(spec)?;
        let log = File::create(&spec.log_path).wrap_err_with(|| {
            format!("cannot create the server log {}", spec.log_path.display())
        })?;
        let log_err = log.try_clone().wrap_err_with(|| {
            format!(
                "cannot open the server log {} twice",
                spec.log_path.display()
            )
        })?;
        cmd.stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .process_group(0);
        die_with_parent(&mut cmd);
        become_subreaper();
        let started = Instant::now();
        let mut child = cmd.spawn().map_err(|e| {
            eyre!(
                "cannot start the server command `{program}`: {}",
                io_words(&e)
            )
        })?;
        let Some(pgid) = i32::try_from(child.id()).ok().filter(|&p| p > 1) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(eyre!(
                "the server command `{program}` got an unusable process id"
            ));
        };
        register(pgid);
        let secrets = spec
            .env
            .iter()
            .filter(|(_, v)| v.len() >= SECRET_MIN_LEN)
            .map(|(_, v)| v.clone())
            .collect();
        Ok(ServerProcess {
            child,
            pgid,
            log_path: spec.log_path.clone(),
            started,
            port: spec.port,
            hint: EngineHint::of_words(&spec.words),
            secrets,
            registered: true,
        })
    }

    /// Non-blocking: Some(description) once the process has exited ("exited with status 1" / "killed by signal 9").
    pub(crate) fn exited(&mut self) -> Option<String> {
        // std keeps the status once reaped, so this answers the same again.
        let status = self.child.try_wait().ok().flatten()?;
        self.settle();
        Some(describe(status))
    }

    /// With the leader reaped: reap what else of the group has ended, and
    /// once nothing of it is left, unregister. Its id may then be handed out
    /// to another process group, which no later signal may reach. (Until
    /// then a member, or a zombie only tokbench reaps, holds the id.)
    fn settle(&mut self) {
        if !self.registered {
            return;
        }
        reap_group(self.pgid);
        if !group_alive(self.pgid) {
            unregister(self.pgid);
            self.registered = false;
        }
    }

    /// SIGKILL to the group while it is registered (see `settle`).
    fn kill_group(&self) {
        if self.registered {
            signal_group(self.pgid, libc::SIGKILL);
        }
    }

    /// The log's last non-empty line (trimmed, at most 200 chars), if any.
    /// Escape sequences and control characters go (a progress bar's colours),
    /// a carriage return ends a line as a newline does, and the server's
    /// secret environment values are blanked.
    pub(crate) fn log_tail(&self) -> Option<String> {
        self.log_reader().line()
    }

    /// What reads the log's last line while the process itself is busy
    /// (a live view's start line while `wait_ready` runs).
    pub(crate) fn log_reader(&self) -> LogTail {
        LogTail {
            path: self.log_path.clone(),
            secrets: self.secrets.clone(),
        }
    }

    /// The error for a server that exited before it was ready.
    fn exited_error(&self, how: &str) -> Report {
        match self.log_tail() {
            Some(line) => {
                eyre!("the server {how} before it was ready; its log's last line: `{line}`")
            }
            None => eyre!(
                "the server {how} before it was ready; its log {} is empty",
                self.log_path.display()
            ),
        }
    }

    /// Wait up to `limit` for the leader to exit; whether it did.
    async fn wait_leader(&mut self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            if self.exited().is_some() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM to the whole group, wait up to `grace` for the leader to exit, then SIGKILL the group; reap; then wait (bounded, ~10 s) until nothing accepts on the port. Unregisters. Returns how it ended (e.g. "stopped by SIGTERM in 0.3 s" / "killed after the 10 s grace").
    pub(crate) async fn stop(mut self, grace: Duration) -> Result<String> {
        let t0 = Instant::now();
        let how = if let Some(before) = self.exited() {
            format!("had already {before}")
        } else {
            signal_group(self.pgid, libc::SIGTERM);
            if self.wait_leader(grace).await {
                format!("stopped by SIGTERM in {:.1} s", t0.elapsed().as_secs_f64())
            } else {
                self.kill_group();
                if !self.wait_leader(KILL_WAIT).await {
                    // Still registered: Drop and kill_all try again.
                    return Err(eyre!(
                        "the server (process group {}) did not exit {} s after SIGKILL",
                        self.pgid,
                        KILL_WAIT.as_secs()
                    ));
                }
                format!("killed after the {} s grace", secs_text(grace))
            }
        };
        // What the leader left: a child that ignored SIGTERM, a shell's job.
        self.kill_group();
        let until = Instant::now() + KILL_WAIT;
        while self.registered {
            self.settle();
            if !self.registered {
                break;
            }
            if Instant::now() >= until {
                return Err(eyre!(
                    "processes of the server's group {} are still there {} s after SIGKILL",
                    self.pgid,
                    KILL_WAIT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let until = Instant::now() + PORT_WAIT;
        while port_accepts_now(self.port).await {
            if Instant::now() >= until {
                return Err(eyre!(
                    "the server {how}, but port 127.0.0.1:{} still accepts connections {} s later: \
                     a process outside its group is listening there",
                    self.port,
                    PORT_WAIT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(how)
    }
}

/// `port_accepts` without blocking the runtime's thread.
async fn port_accepts_now(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    matches!(
        tokio::time::timeout(
            Duration::from_millis(500),
            tokio::net::TcpStream::connect(addr)
        )
        .await,
        Ok(Ok(_))
    )
}

impl Drop for ServerProcess {
    /// A server not stopped (an error path, a panic unwinding) is killed:
    /// never leave one behind. Synchronous and bounded (DROP_WAIT): SIGKILL
    /// takes effect in milliseconds, and the wait reaps what it killed. A
    /// group that outlasts the wait stays registered for `kill_all`; its
    /// unreaped leader keeps its id from being handed out meanwhile.
    fn drop(&mut self) {
        self.kill_group();
        let until = Instant::now() + DROP_WAIT;
        while self.registered && Instant::now() < until {
            let _ = self.exited();
            if self.registered {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// The last non-empty line of the file's end, cleaned for a one-line message.
fn last_line(path: &Path) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)))
        .ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    text.rsplit(['\n', '\r'])
        .map(clean)
        .find(|line| !line.is_empty())
}

/// A line without escape sequences or control characters, trimmed, at most
/// TAIL_CHARS characters.
fn clean(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters, then one final byte in @..~.
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        if !c.is_control() {
            out.push(c);
        }
    }
    out.trim().chars().take(TAIL_CHARS).collect()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
