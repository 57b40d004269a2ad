//! The server settings a tune walks: `--grid np=1,2,4` (a Cartesian
//! product of every grid) and `--grid-link np,ctx` (linked variables walk
//! together), and the `{name}` template they fill.

use color_eyre::eyre::{bail, Result};

/// One setting of the grid: each variable's value, in the grid's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Setting {
    pub values: Vec<(String, String)>,
}

impl Setting {
    /// `np=4` or `np=4 ctx=8192`: how the series and the tables name it.
    pub(crate) fn label(&self) -> String {
        self.values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The label as a file-name part: `np=4_ctx=8192`, any other
    /// character than letters, digits, `=`, `.`, `-` and `_` as `_`.
    pub(crate) fn file_part(&self) -> String {
        self.label()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "=.-_".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }
}

/// `NAME=V1,V2,...` from `--grid`.
fn parse_grid(text: &str) -> Result<(String, Vec<String>)> {
    let Some((name, values)) = text.split_once('=') else {
        bail!("--grid {text:?}: expected NAME=V1,V2,... (e.g. np=1,2,4)");
    };
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!(
            "--grid {text:?}: the name must be letters, digits or _ (it is filled as {{{name}}})"
        );
    }
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().any(String::is_empty) {
        bail!("--grid {text:?}: an empty value; give NAME=V1,V2,...");
    }
    Ok((name.to_string(), values))
}

/// Every setting of the grids, in order: the first grid varies slowest.
/// Linked names (`--grid-link np,ctx`) take their i-th values together and
/// must have as many values each.
pub(crate) fn settings(grids: &[String], links: &[String]) -> Result<Vec<Setting>> {
    let mut parsed: Vec<(String, Vec<String>)> = Vec::new();
    for g in grids {
        let (name, values) = parse_grid(g)?;
        if parsed.iter().any(|(n, _)| *n == name) {
            bail!("--grid {name} is given twice: give its values once (--grid {name}=a,b)");
        }
        parsed.push((name, values));
    }
    if parsed.is_empty() {
        bail!("tune needs at least one --grid NAME=V1,V2,... (e.g. --grid np=1,2,4)");
    }
    // Groups: each link is one axis; every other grid is an axis of its own.
    let mut axes: Vec<Vec<usize>> = Vec::new();
    let mut linked = vec![false; parsed.len()];
    for link in links {
        let mut axis = Vec::new();
        for name in link.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some(i) = parsed.iter().position(|(n, _)| n == name) else {
                bail!("--grid-link {link}: {name} has no --grid {name}=...");
            };
            if linked[i] {
                bail!("--grid-link: {name} is linked twice");
            }
            linked[i] = true;
            axis.push(i);
        }
        if axis.len() < 2 {
            bail!("--grid-link {link}: name two or more grids (e.g. np,ctx)");
        }
        let len = parsed[axis[0]].1.len();
        if let Some(&j) = axis.iter().find(|&&j| parsed[j].1.len() != len) {
            bail!(
                "--grid-link {link}: {} has {} values and {} has {len}; linked grids walk together and need as many each",
                parsed[j].0,
                parsed[j].1.len(),
                parsed[axis[0]].0
            );
        }
        axes.push(axis);
    }
    for (i, _) in parsed.iter().enumerate() {
        if !linked[i] {
            axes.push(vec![i]);
        }
    }
    // Axes in the order their first grid was given.
    axes.sort_by_key(|a| a.iter().copied().min().unwrap_or(0));
    let mut out: Vec<Vec<(usize, String)>> = vec![Vec::new()];
    for axis in &axes {
        let steps = parsed[axis[0]].1.len();
        let mut next = Vec::with_capacity(out.len() * steps);
        for partial in &out {
            for step in 0..steps {
                let mut s = partial.clone();
                s.extend(axis.iter().map(|&i| (i, parsed[i].1[step].clone())));
                next.push(s);
            }
        }
        out = next;
    }
    Ok(out
        .into_iter()
        .map(|mut s| {
            s.sort_by_key(|(i, _)| *i);
            Setting {
                values: s
                    .into_iter()
                    .map(|(i, v)| (parsed[i].0.clone(), v))
                    .collect(),
            }
        })
        .collect())
}

/// The `{name}`s a template uses, in order of first use. `{{` and `}}` are
/// literal braces.
pub(crate) fn names_in(template: &str) -> Result<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        if rest[open..].starts_with("{{") {
            rest = &rest[open + 2..];
            continue;
        }
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            bail!("the server command has a {{ without its }}: write {{{{ for a literal brace");
        };
        let name = &after[..close];
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
        rest = &after[close + 1..];
    }
    Ok(names)
}

/// Refuse a template that names what no grid gives, or that cannot tell
/// the server its port; nothing is started before this passes.
pub(crate) fn check_template(
    what: &str,
    template: &str,
    grid_names: &[String],
    needs_port: bool,
) -> Result<Vec<String>> {
    let names = names_in(template)?;
    for name in &names {
        if name != "port" && !grid_names.iter().any(|g| g == name) {
            let known = std::iter::once("port".to_string())
                .chain(grid_names.iter().cloned())
                .map(|n| format!("{{{n}}}"))
                .collect::<Vec<_>>()
                .join(", ");
            bail!("{what} uses {{{name}}}, which no --grid names (known: {known})");
        }
    }
    if needs_port && !names.iter().any(|n| n == "port") {
        bail!("the server command must listen on {{port}}, or give --serve-port");
    }
    Ok(names)
}

/// The template with each `{name}` replaced by the setting's value (and
/// `{port}`); `{{`/`}}` become braces. Applied to each word after the
/// command is split, so a value is always one word, never shell syntax.
pub(crate) fn fill(template: &str, setting: &Setting, port: u16) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        out.push_str(&rest[..open]);
        let tail = &rest[open..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
            continue;
        }
        if let Some(after) = tail.strip_prefix('}') {
            out.push('}');
            rest = after;
            continue;
        }
        let Some(close) = tail.find('}') else {
            out.push_str(tail);
            return out;
        };
        let name = &tail[1..close];
        if name == "port" {
            out.push_str(&port.to_string());
        } else if let Some((_, v)) = setting.values.iter().find(|(k, _)| k == name) {
            out.push_str(v);
        } else {
            out.push_str(&tail[..=close]);
        }
        rest = &tail[close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(grids: &[&str], links: &[&str]) -> Vec<String> {
        let g: Vec<String> = grids.iter().map(|s| s.to_string()).collect();
        let l: Vec<String> = links.iter().map(|s| s.to_string()).collect();
        settings(&g, &l)
            .unwrap()
            .iter()
            .map(Setting::label)
            .collect()
    }

    #[test]
    fn two_grids_are_a_product_the_first_slowest() {
        assert_eq!(
            labels(&["np=1,2", "ctx=4096,8192"], &[]),
            vec![
                "np=1 ctx=4096",
                "np=1 ctx=8192",
                "np=2 ctx=4096",
                "np=2 ctx=8192"
            ]
        );
    }

    #[test]
    fn a_link_walks_its_grids_together() {
        assert_eq!(
            labels(&["np=1,2,4", "ctx=4096,8192,16384"], &["np,ctx"]),
            vec!["np=1 ctx=4096", "np=2 ctx=8192", "np=4 ctx=16384"]
        );
        // A link and a free grid: 3 linked steps x 2.
        assert_eq!(
            labels(&["np=1,2,4", "ctx=4096,8192,16384", "b=a,b"], &["np,ctx"]).len(),
            6
        );
        let err = settings(&["np=1,2,4".into(), "ctx=1,2".into()], &["np,ctx".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("ctx has 2 values and np has 3"), "{err}");
        let err = settings(&["np=1".into()], &["np,nq".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("nq has no --grid"), "{err}");
    }

    #[test]
    fn bad_grids_are_one_line() {
        for (g, want) in [
            ("np", "expected NAME=V1,V2"),
            ("np=1,,2", "an empty value"),
            ("n p=1", "letters, digits"),
        ] {
            let err = settings(&[g.into()], &[]).unwrap_err().to_string();
            assert!(err.contains(want), "{g}: {err}");
            assert!(!err.contains('\n'));
        }
        let err = settings(&[], &[]).unwrap_err().to_string();
        assert!(err.contains("at least one --grid"), "{err}");
    }

    #[test]
    fn a_template_naming_no_grid_is_refused() {
        let grid = vec!["np".to_string()];
        let err = check_template("--serve-cmd", "srv --port {port} -np {nq}", &grid, true)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "--serve-cmd uses {nq}, which no --grid names (known: {port}, {np})"
        );
        let err = check_template("--serve-cmd", "srv -np {np}", &grid, true)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "the server command must listen on {port}, or give --serve-port"
        );
        assert!(check_template("--serve-cmd", "srv -np {np}", &grid, false).is_ok());
    }

    #[test]
    fn fill_replaces_names_and_keeps_literal_braces() {
        let s = Setting {
            values: vec![("np".into(), "4".into()), ("ctx".into(), "8192".into())],
        };
        assert_eq!(fill("-np {np} -c{ctx}", &s, 9), "-np 4 -c8192");
        assert_eq!(fill("--port={port}", &s, 18001), "--port=18001");
        assert_eq!(fill("{{\"a\":{np}}}", &s, 1), "{\"a\":4}");
        assert_eq!(s.file_part(), "np=4_ctx=8192");
    }

    /// A value with shell syntax fills one word of an already split
    /// command: it is never interpreted.
    #[test]
    fn a_value_with_shell_syntax_stays_one_word() {
        let s = Setting {
            values: vec![("np".into(), "1;rm -rf $(x)".into())],
        };
        let words: Vec<String> = crate::server::split_words("srv --np {np} --port {port}")
            .unwrap()
            .iter()
            .map(|w| fill(w, &s, 7))
            .collect();
        assert_eq!(words, vec!["srv", "--np", "1;rm -rf $(x)", "--port", "7"]);
    }
}
