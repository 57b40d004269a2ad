//! `sweep --resume DIR` with no `--config`: the run's own settings, the
//! `config.toml` its folder holds, are read as a config file would be, so
//! `--resume DIR` alone continues the run. A flag given as well overrides
//! the file's, except one naming another server or model than the run's:
//! that is another run, refused here in one line before anything is sent.

use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::ArgMatches;
use color_eyre::eyre::{bail, Result};

/// The saved settings `--resume DIR` reads: `DIR/config.toml`, for a
/// sweep or a tune given no `--config` of its own, where the folder has one.
pub(crate) fn saved_config(name: &str, sub: &ArgMatches) -> Option<PathBuf> {
    if !["sweep", "tune"].contains(&name) {
        return None;
    }
    let path = sub.get_one::<PathBuf>("resume")?.join("config.toml");
    path.is_file().then_some(path)
}

/// Refuse a `--base-url` or `--model` on the command line that is not the
/// resumed run's (`text`, its config.toml). URLs are shown without
/// credentials; one given with them is the same server as the saved one.
pub(crate) fn refuse_another_target(path: &Path, text: &str, sub: &ArgMatches) -> Result<()> {
    let Ok(table) = text.parse::<toml::Table>() else {
        // Not TOML: reading it as the config file says so, in its words.
        return Ok(());
    };
    let dir = path.parent().unwrap_or(path).display();
    let given = |id: &str| {
        (sub.value_source(id) == Some(ValueSource::CommandLine))
            .then(|| sub.get_one::<String>(id).cloned())
            .flatten()
    };
    let saved = |key: &str| table.get(key).and_then(|v| v.as_str()).map(str::to_string);
    if let (Some(now), Some(then)) = (given("base_url"), saved("base-url")) {
        let (now, then) = (server_root(&now), server_root(&then));
        if now != then {
            bail!(
                "--resume {dir}: the run was against {then}, not --base-url {now}: leave --base-url out to resume it, or start a new run"
            );
        }
    }
    if let (Some(now), Some(then)) = (given("model"), saved("model")) {
        if now != then {
            bail!(
                "--resume {dir}: the run's model was {then}, not --model {now}: leave --model out to resume it, or start a new run"
            );
        }
    }
    Ok(())
}

/// A server root as saved (`run::plan` normalizes it the same way: no
/// trailing `/`, no `/v1`), without credentials.
fn server_root(raw: &str) -> String {
    let trimmed = raw.trim().trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/v1").unwrap_or(trimmed);
    match reqwest::Url::parse(trimmed) {
        Ok(_) => crate::redact::base_url(trimmed),
        Err(_) => crate::redact::typed_url(trimmed),
    }
}

#[cfg(test)]
mod tests {
    use super::server_root;

    #[test]
    fn a_root_compares_without_credentials_slash_or_v1() {
        assert_eq!(server_root("http://u:p@h:8000/v1/"), "http://h:8000");
        assert_eq!(server_root("http://h:8000"), "http://h:8000");
        assert_ne!(server_root("http://h:8001"), "http://h:8000");
    }
}
