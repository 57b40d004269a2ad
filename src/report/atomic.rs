//! Writes that a crash or a Ctrl-C can never leave half done, and that
//! a run out of file descriptors does not lose: a few descriptors are held
//! in reserve from the run's start and given up for a result file's write
//! when the load has taken every other one.

use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// Descriptors held for the result files: a level file or `summary.json`
/// needs one while written, a report or `probes.jsonl` one more.
const RESERVE: usize = 8;
/// Tries of a write that found no descriptor: one a descriptor of the
/// reserve given up, then one a pause.
const TRIES: u32 = RESERVE as u32 + 25;
/// Between two tries once the reserve is spent: a stream that ends gives
/// its socket back.
const RETRY_AFTER: Duration = Duration::from_millis(20);

static HELD: Mutex<Vec<fs::File>> = Mutex::new(Vec::new());

/// Hold the reserve (up to [`RESERVE`] descriptors on `/dev/null`), from
/// before the load starts. Best effort: a process already out of them
/// holds what it can.
pub(crate) fn hold_descriptor_reserve() {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    while held.len() < RESERVE {
        match fs::File::open(null_device()) {
            Ok(file) => held.push(file),
            Err(_) => break,
        }
    }
}

fn null_device() -> &'static str {
    if cfg!(windows) {
        "NUL"
    } else {
        "/dev/null"
    }
}

/// No descriptor left in this process or the system (`EMFILE`, `ENFILE`).
fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(
        crate::record::client_limit_class(e),
        Some(crate::record::ErrorClass::ClientFdLimit)
    )
}

/// Run `op` (which opens a file); where it finds no descriptor, give up
/// one descriptor of the reserve and try at once, so the load can take no
/// more than that one before the open; the rest stay held for the next
/// try. A reserve spent, tries go on a little while, as streams end. Before
/// and after, the reserve is taken back as far as it can be (the load may
/// have taken what an earlier write gave up).
pub(crate) fn with_descriptor_reserve<T>(mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    hold_descriptor_reserve();
    let mut result = op();
    let mut tries = 1;
    while matches!(&result, Err(e) if out_of_descriptors(e)) && tries < TRIES {
        let given_up = HELD.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match given_up {
            Some(file) => drop(file),
            None => std::thread::sleep(RETRY_AFTER),
        }
        result = op();
        tries += 1;
    }
    hold_descriptor_reserve();
    result
}

/// How many descriptors the reserve holds now.
#[cfg(test)]
fn held() -> usize {
    HELD.lock().unwrap_or_else(|e| e.into_inner()).len()
}

/// Write `bytes` to `path` through a temporary file in the same folder and a
/// rename, so readers see the old file or the new one, never a torn one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |file| file.write_all(bytes))
}

/// A result file's JSON as every writer lays it out (pretty, a newline at
/// the end), written by [`write_atomic`].
pub(crate) fn write_json_atomic(path: &Path, value: &serde_json::Value) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_else(|_| b"{}".to_vec());
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// [`write_atomic`] for a body written piece by piece (a level file's
/// samples are streamed, never held as one buffer).
pub(crate) fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut io::BufWriter<fs::File>) -> io::Result<()>,
) -> io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("tokbench-output");
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let file = with_descriptor_reserve(|| fs::File::create(&tmp))?;
        let mut file = io::BufWriter::new(file);
        write(&mut file)?;
        let file = file.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An open that finds no descriptor twice is tried again with the
    /// reserve given up, and succeeds; one that never finds one fails
    /// after [`TRIES`], with the error it got.
    #[test]
    fn an_open_out_of_descriptors_is_tried_again() {
        let emfile = || io::Error::from_raw_os_error(24);
        let mut calls = 0;
        let got = with_descriptor_reserve(|| {
            calls += 1;
            if calls <= 2 {
                Err(emfile())
            } else {
                Ok(calls)
            }
        });
        assert_eq!(got.ok(), Some(3));
        // The reserve is given up one descriptor a try, the open right
        // after it, and taken back after the write.
        let mut calls = 0;
        let got = with_descriptor_reserve(|| {
            calls += 1;
            assert!(
                held() + calls > RESERVE,
                "try {calls}: the reserve holds {} of {RESERVE}",
                held()
            );
            if calls <= 3 {
                Err(emfile())
            } else {
                Ok(())
            }
        });
        assert!(got.is_ok());
        assert_eq!(held(), RESERVE, "the reserve is taken back");
        // A reserve the load emptied is taken back before the next write.
        HELD.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let _ = with_descriptor_reserve(|| {
            assert_eq!(held(), RESERVE, "held again before the open");
            Ok(())
        });
        let mut calls = 0;
        let got: io::Result<()> = with_descriptor_reserve(|| {
            calls += 1;
            Err(emfile())
        });
        assert_eq!(calls, TRIES);
        assert_eq!(got.map_err(|e| e.raw_os_error()), Err(Some(24)));
        // Another failure is not retried.
        let mut calls = 0;
        let _ = with_descriptor_reserve(|| -> io::Result<()> {
            calls += 1;
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        });
        assert_eq!(calls, 1);
    }

    #[test]
    fn replaces_whole_file_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("tokbench-atomic-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("summary.json");
        write_atomic(&path, b"{\"a\":1}").expect("first write");
        write_atomic(&path, b"{}").expect("second write");
        assert_eq!(fs::read(&path).expect("read"), b"{}");
        let names: Vec<_> = fs::read_dir(&dir)
            .expect("list")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "only the target file remains: {names:?}");
        fs::remove_dir_all(&dir).ok();
    }
}
