//! The notes audit: what a run printed, read against what the run asked
//! for. Each rule is a sentence tokbench must never say on a run like it:
//! a note about an asked length where none was asked, `ignore_eos` where
//! the server did not honour it, `level k/n` with k past n, a table row
//! without its series, a rate level's streams read as `~0`, a capacity
//! line's peak that is not the table's.

/// What the run asked for, as its command line says.
#[derive(Clone, Copy, Debug)]
pub struct Asked {
    /// One prompt length was asked for (`--random-input-len`), not lengths
    /// from a dataset, a trace or earlier turns.
    pub one_prompt_length: bool,
    /// One answer length was asked for (`--random-output-len`).
    pub one_answer_length: bool,
    /// The server honours `ignore_eos` (not Ollama).
    pub ignore_eos_honoured: bool,
    /// Prompts share text on purpose (turns, `--prefix-len`): a cache
    /// answering them is the workload, not a flaw of the run.
    pub repeats_by_design: bool,
    /// Replayed traffic (`--replay`): the only run whose rows say `replay`.
    pub replay: bool,
    /// The labels of the run's series, where it has several (a tune's
    /// settings, `np=1`; a restart's `series 2`); empty for one.
    pub series: &'static [&'static str],
}

impl Asked {
    /// A plain sweep: one length each way, a server that honours
    /// `ignore_eos`, one series.
    pub fn fixed() -> Asked {
        Asked {
            one_prompt_length: true,
            one_answer_length: true,
            ignore_eos_honoured: true,
            repeats_by_design: false,
            replay: false,
            series: &[],
        }
    }
}

/// Every contradiction between `printed` and `asked`, one line each.
pub fn contradictions(printed: &str, asked: &Asked) -> Vec<String> {
    let lines: Vec<&str> = printed
        .split(['\n', '\r'])
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let mut found = Vec::new();
    for line in &lines {
        let lower = line.to_lowercase();
        let about_prompts = lower.contains("prompt");
        if !asked.one_prompt_length && lower.contains("asked for") && about_prompts {
            found.push(format!(
                "a prompt-length note with no prompt length asked: {line}"
            ));
        }
        let about_answers = lower.contains("ended before")
            || (lower.contains("asked for") && lower.contains("answer"));
        if !asked.one_answer_length && about_answers {
            found.push(format!(
                "an answer-length note with no answer length asked: {line}"
            ));
        }
        if !asked.ignore_eos_honoured && line.contains("ignore_eos") {
            found.push(format!(
                "ignore_eos where the server does not honour it: {line}"
            ));
        }
        if asked.repeats_by_design && lower.contains("prompts repeat") {
            found.push(format!(
                "prompts that share text on purpose called a flaw: {line}"
            ));
        }
        if let Some((k, n)) = level_of(line) {
            if k > n {
                found.push(format!("level {k} of {n}: {line}"));
            }
        }
    }
    found.extend(table_contradictions(&lines, asked));
    found
}

/// Fails the test with every contradiction and the whole output.
pub fn assert_true_to_the_run(what: &str, printed: &str, asked: &Asked) {
    let found = contradictions(printed, asked);
    assert!(
        found.is_empty(),
        "{what}: {} contradiction(s):\n  {}\n--- printed ---\n{printed}",
        found.len(),
        found.join("\n  ")
    );
}

/// `level 8/6` in a line: (8, 6).
fn level_of(line: &str) -> Option<(u64, u64)> {
    let at = line.find("level ")?;
    let rest = &line[at + "level ".len()..];
    let (k, rest) = rest.split_once('/')?;
    let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((k.trim().parse().ok()?, n.parse().ok()?))
}

/// The field of a right-aligned column: the last word of `row` up to where
/// `label` ends in `header`.
fn column<'a>(row: &'a str, header: &str, label: &str) -> Option<&'a str> {
    let end = header.find(label)? + label.len();
    row.get(..end.min(row.len()))?.split_whitespace().last()
}

fn number(field: &str) -> Option<f64> {
    field.trim_start_matches('~').replace(',', "").parse().ok()
}

/// The sweep tables: rows labelled with their series, streams that say
/// how many streams there were, the capacity line's peak the table's own.
fn table_contradictions(lines: &[&str], asked: &Asked) -> Vec<String> {
    let mut found = Vec::new();
    let mut peak_in_tables: Option<f64> = None;
    let mut i = 0;
    while i < lines.len() {
        let header = lines[i];
        if !(header.contains("streams") && header.contains("total tok/s")) {
            i += 1;
            continue;
        }
        let by_column = header.contains("series");
        let mut under_heading = false;
        i += 1;
        while i < lines.len() {
            let row = lines[i];
            if row.trim_start().to_lowercase().starts_with("series") {
                under_heading = true;
                i += 1;
                continue;
            }
            let Some(streams) = column(row, header, "streams") else {
                break;
            };
            let Some(total) = column(row, header, "total tok/s").and_then(number) else {
                break;
            };
            if streams != "-" && number(streams).is_none() {
                break;
            }
            let per_stream = column(row, header, "tok/s/stream").and_then(number);
            if streams == "~0" || streams == "0" {
                found.push(format!("a level that ran read as {streams} streams: {row}"));
            }
            if let (Some(n), Some(per)) = (number(streams), per_stream) {
                if n >= 1.5 && total > 0.0 && (per - total).abs() < 0.05 {
                    found.push(format!("{streams} streams, yet per stream = total: {row}"));
                }
            }
            let labelled = asked.series.iter().any(|label| row.contains(label));
            if asked.series.len() > 1 && !by_column && !under_heading && !labelled {
                found.push(format!(
                    "a row of a {}-series run without its series: {row}",
                    asked.series.len()
                ));
            }
            if !asked.replay
                && header
                    .find("note")
                    .is_some_and(|at| row.get(at..).is_some_and(|n| n.contains("replay")))
            {
                found.push(format!(
                    "a row that says replay in a run that replays nothing: {row}"
                ));
            }
            peak_in_tables = Some(peak_in_tables.map_or(total, |p: f64| p.max(total)));
            i += 1;
        }
    }
    if asked.series.len() <= 1 {
        if let Some(table_peak) = peak_in_tables {
            for line in lines.iter().filter(|l| l.starts_with("capacity")) {
                let Some(at) = line.find("of the peak ") else {
                    continue;
                };
                let said: String = line[at + "of the peak ".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '.')
                    .collect();
                if let Some(said) = number(&said) {
                    // The line rounds to a whole tok/s, the table to a tenth.
                    if (said - table_peak).abs() > 1.0 {
                        found.push(format!("the capacity line's peak {said} is not the table's {table_peak}: {line}"));
                    }
                }
            }
        }
    }
    found
}
