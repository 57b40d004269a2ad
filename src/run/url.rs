//! The target's URL and the result folder's name.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use color_eyre::eyre::{bail, eyre, Result};

use crate::report::time;

/// `http://host:8000/` and `http://host:8000/v1` both mean the root `http://host:8000`.
pub(crate) fn normalize_base_url(raw: &str) -> Result<String> {
    let trimmed = raw.trim().trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/v1").unwrap_or(trimmed);
    // A refused URL is echoed, its credentials not.
    let shown = crate::redact::typed_url(raw);
    let url = reqwest::Url::parse(trimmed).map_err(|e| {
        eyre!("--base-url {shown} is not a URL ({e}); write it like http://127.0.0.1:8000")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        bail!("--base-url {shown} must start with http:// or https://");
    }
    Ok(trimmed.to_string())
}

/// The URL without credentials, for screens and files.
pub(super) fn with_slash(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    }
}

/// `results/20261129-191400`, or with `-2`, `-3`, ... when that exists.
pub(crate) fn default_result_dir(root: &Path, now: SystemTime) -> PathBuf {
    let stamp = time::compact(now);
    let mut dir = root.join(&stamp);
    let mut n = 2;
    while dir.exists() {
        dir = root.join(format!("{stamp}-{n}"));
        n += 1;
    }
    dir
}
