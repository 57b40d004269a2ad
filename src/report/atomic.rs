//! Writes that a crash or a Ctrl-C can never leave half done.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

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
        let mut file = io::BufWriter::new(fs::File::create(&tmp)?);
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
