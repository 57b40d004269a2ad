//! The merge's I/O: read each shard folder (summary.json and the level
//! files it names), write the merged folder (level files, summary.json,
//! requests.jsonl with a `shard` per line, report.md and chart.svg), and
//! the `tokbench merge` command around [`super::merge`].

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use color_eyre::eyre::{bail, Result, WrapErr};
use serde_json::Value;

use super::{merge, MergeError, MergeOptions, Merged, ShardRun};
use crate::cli::MergeArgs;
use crate::compare::EXIT_REFUSED;
use crate::report::atomic::write_json_atomic;
use crate::report::saved::read_summary;
use crate::report::schema::{LevelFile, SummaryFile};

/// The folder of a run given as a folder or as its summary.json.
pub(crate) fn folder_of(path: &Path) -> PathBuf {
    if path.file_name().is_some_and(|n| n == "summary.json") {
        path.parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    } else {
        path.to_path_buf()
    }
}

/// One shard folder: its summary.json and every level file it lists.
pub(crate) fn load_shard(path: &Path) -> Result<ShardRun> {
    let dir = folder_of(path);
    let (summary_path, text) = read_summary(&dir)?;
    let summary: SummaryFile = serde_json::from_str(&text)
        .wrap_err_with(|| format!("{} is not a tokbench summary", summary_path.display()))?;
    let mut levels = Vec::with_capacity(summary.levels.len());
    for (i, entry) in summary.levels.iter().enumerate() {
        let Some(file) = entry.file.as_deref() else {
            bail!(
                "{}: level {} names no level file",
                summary_path.display(),
                i + 1
            );
        };
        let level_path = dir.join(file);
        let text = std::fs::read_to_string(&level_path)
            .wrap_err_with(|| format!("cannot read {}", level_path.display()))?;
        let mut level: LevelFile = serde_json::from_str(&text)
            .wrap_err_with(|| format!("{} is not a level file", level_path.display()))?;
        level.file = Some(file.to_string());
        levels.push(level);
    }
    Ok(ShardRun {
        name: dir.display().to_string(),
        summary,
        levels,
    })
}

/// Writes the merged folder. `inputs` are the shard folders, in the order
/// [`super::merge`] was given them.
pub(crate) fn write_merged(out: &Path, merged: &Merged, inputs: &[PathBuf]) -> Result<()> {
    if out.join("summary.json").exists() {
        bail!(
            "{} already holds a run (summary.json): give -o a new folder",
            out.display()
        );
    }
    std::fs::create_dir_all(out).wrap_err_with(|| format!("cannot create {}", out.display()))?;
    for (name, level) in &merged.levels {
        let path = out.join(name);
        write_json_atomic(&path, &level.to_value())
            .wrap_err_with(|| format!("cannot write {}", path.display()))?;
    }
    let skipped = write_requests(out, merged, inputs)?;
    if skipped > 0 {
        crate::say!("tokbench merge: {skipped} unreadable requests.jsonl lines left out");
    }
    crate::report::formats::write_summary_and_reports(out, &merged.summary.to_value())
}

/// The shards' requests.jsonl, one after the other, each line with the
/// `shard` that sent it (a merged input's lines keep theirs). Returns the
/// lines that were not JSON objects (a torn last line), left out.
fn write_requests(out: &Path, merged: &Merged, inputs: &[PathBuf]) -> Result<u64> {
    let path = out.join("requests.jsonl");
    let file = File::create(&path).wrap_err_with(|| format!("cannot write {}", path.display()))?;
    let mut writer = BufWriter::new(file);
    let mut skipped = 0;
    for &(i, shard) in &merged.order {
        let Some(input) = inputs.get(i) else { continue };
        let source = folder_of(input).join("requests.jsonl");
        let Ok(file) = File::open(&source) else {
            // A shard without requests.jsonl merges its level files alone.
            continue;
        };
        for line in BufReader::new(file).lines() {
            let line = line.wrap_err_with(|| format!("cannot read {}", source.display()))?;
            if line.trim().is_empty() {
                continue;
            }
            let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(&line) else {
                skipped += 1;
                continue;
            };
            if let Some(index) = shard {
                object.entry("shard").or_insert_with(|| Value::from(index));
            }
            serde_json::to_writer(&mut writer, &Value::Object(object))
                .map_err(std::io::Error::from)
                .and_then(|()| writer.write_all(b"\n"))
                .wrap_err_with(|| format!("cannot write {}", path.display()))?;
        }
    }
    writer
        .flush()
        .wrap_err_with(|| format!("cannot write {}", path.display()))?;
    Ok(skipped)
}

/// `tokbench merge DIR... -o OUT`.
pub fn run_merge_command(args: &MergeArgs) -> Result<i32> {
    let runs = args
        .dirs
        .iter()
        .map(|d| load_shard(d))
        .collect::<Result<Vec<_>>>()?;
    let merged = match merge(
        &runs,
        MergeOptions {
            allow_missing: args.allow_missing,
        },
    ) {
        Ok(m) => m,
        Err(MergeError::Refused(why)) => {
            crate::say!("tokbench merge: refused: {why}");
            return Ok(EXIT_REFUSED);
        }
        Err(MergeError::Broken(e)) => return Err(e),
    };
    for w in &merged.warnings {
        crate::say!("tokbench merge: warning: {w}");
    }
    write_merged(&args.output, &merged, &args.dirs)?;
    crate::say!(
        "tokbench merge: {} shard folders, {} levels -> {}",
        runs.len(),
        merged.levels.len(),
        args.output.display()
    );
    Ok(0)
}
