//! `--dataset FILE`: requests from a file instead of generated prompts.
//!
//! Two formats, told apart by the first character that is not white space:
//! - JSONL (anything but `[`): one request per line, an object with either
//!   `"prompt": "text"` or `"messages": [{"role": "...", "content": "..."}]`,
//!   and optionally `"output_len": N` (max_tokens for that request). A line
//!   holding a ShareGPT entry (`{"conversations": [...]}`) is read as one.
//!   Blank lines are ignored.
//! - ShareGPT JSON (`[`): one array of entries, each with `"conversations":
//!   [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]`.
//!   The first human (or user) turn is the prompt; the first gpt (or
//!   assistant) turn after it gives an output length hint: its length in
//!   words, used only when `--random-output-len` was not given.
//!
//! A line (or entry) that cannot be used is reported with its 1-based line
//! number and a reason, and skipped; reading a dataset never panics.

use std::path::Path;

use serde_json::{Map, Value};

/// One message of a chat request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// Messages as plain text for a prompt-only API: one `role: content` line each.
pub(crate) fn flatten_messages(messages: &[ChatMessage]) -> String {
    messages
        .iter()
        .map(|m| format!("{}: {}", m.role, m.content))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One usable request of a dataset.
#[derive(Clone, Debug, PartialEq)]
pub struct DatasetRecord {
    /// The prompt as sent to a prompt API; for a messages record, the
    /// messages flattened (`role: content` lines).
    pub text: String,
    /// A chat record: sent as these messages on a chat API.
    pub messages: Option<Vec<ChatMessage>>,
    /// `output_len` of the record: always used.
    pub output_len: Option<u32>,
    /// ShareGPT: the first answer's length in words, used when no
    /// `--random-output-len` was given.
    pub output_hint: Option<u32>,
    /// Whitespace-separated words of `text`: the input length estimate.
    pub words: usize,
}

/// A line left out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedLine {
    /// 1-based line of the file (for ShareGPT: where the entry starts).
    pub line: usize,
    pub reason: String,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DatasetFormat {
    Jsonl,
    ShareGpt,
}

impl DatasetFormat {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DatasetFormat::Jsonl => "jsonl",
            DatasetFormat::ShareGpt => "sharegpt",
        }
    }
}

/// A dataset read and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// The file name (not the full path), for result files and titles.
    pub name: String,
    pub format: DatasetFormat,
    pub records: Vec<DatasetRecord>,
    pub skipped: Vec<SkippedLine>,
}

impl Dataset {
    /// Read a dataset file. Errors only when the file cannot be read or no
    /// record is usable.
    pub(crate) fn load(path: &Path) -> Result<Dataset, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read the dataset {}: {e}", path.display()))?;
        let text = String::from_utf8_lossy(&bytes);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let dataset = Dataset::parse(&text, &name)?;
        if dataset.records.is_empty() {
            return Err(format!(
                "the dataset {} has no usable request ({} lines skipped{})",
                path.display(),
                dataset.skipped.len(),
                dataset
                    .skipped
                    .first()
                    .map(|s| format!("; line {}: {}", s.line, s.reason))
                    .unwrap_or_default()
            ));
        }
        Ok(dataset)
    }

    /// Parse a dataset's text (see the module's doc for the formats).
    pub(crate) fn parse(text: &str, name: &str) -> Result<Dataset, String> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        if text.trim_start().starts_with('[') {
            parse_sharegpt(text, name)
        } else {
            Ok(parse_jsonl(text, name))
        }
    }

    /// The `dataset` object of `summary.json`.
    pub(crate) fn to_json(&self) -> Value {
        serde_json::json!({
            "file": self.name,
            "format": self.format.as_str(),
            "records": self.records.len(),
            "skipped": self.skipped.len(),
            "skipped_lines": self.skipped.iter()
                .map(|s| serde_json::json!({"line": s.line, "reason": s.reason}))
                .collect::<Vec<_>>(),
        })
    }
}

fn parse_jsonl(text: &str, name: &str) -> Dataset {
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let result = match serde_json::from_str::<Value>(line) {
            Err(_) => Err("not valid JSON".to_string()),
            Ok(Value::Object(map)) => record_of_object(&map),
            Ok(_) => Err("not a JSON object".to_string()),
        };
        match result {
            Ok(record) => records.push(record),
            Err(reason) => skipped.push(SkippedLine {
                line: line_no,
                reason,
            }),
        }
    }
    Dataset {
        name: name.to_string(),
        format: DatasetFormat::Jsonl,
        records,
        skipped,
    }
}

fn parse_sharegpt(text: &str, name: &str) -> Result<Dataset, String> {
    let (elements, closed) = top_level_elements(text);
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    for (i, element) in elements.iter().enumerate() {
        let slice = text
            .get(element.start..element.end)
            .unwrap_or("")
            .trim_end();
        let result = match serde_json::from_str::<Value>(slice) {
            Ok(Value::Object(map)) => record_of_object(&map),
            Ok(_) => Err("not a JSON object".to_string()),
            Err(_) if !closed && i + 1 == elements.len() => {
                Err("not valid JSON (the file ends inside this entry)".to_string())
            }
            Err(_) => Err("not valid JSON".to_string()),
        };
        match result {
            Ok(record) => records.push(record),
            Err(reason) => skipped.push(SkippedLine {
                line: element.line,
                reason: format!("entry {}: {reason}", i + 1),
            }),
        }
    }
    Ok(Dataset {
        name: name.to_string(),
        format: DatasetFormat::ShareGpt,
        records,
        skipped,
    })
}

/// One element of the top-level JSON array: its bytes and first line.
#[derive(Debug, PartialEq, Eq)]
struct Element {
    start: usize,
    end: usize,
    /// 1-based line it starts on.
    line: usize,
}

/// Split the top-level JSON array into its elements without parsing them,
/// so a big file (ShareGPT's is hundreds of MB) is parsed one entry at a
/// time, never as one tree in memory, and a broken or cut-off entry costs
/// only itself. A scanner that knows strings and nesting is enough to find
/// the boundaries; each element is then parsed for real. Returns the
/// elements and whether the array was closed.
fn top_level_elements(text: &str) -> (Vec<Element>, bool) {
    let mut elements = Vec::new();
    let (mut line, mut depth) = (1usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    // (first byte, line) of the element being scanned.
    let mut current: Option<(usize, usize)> = None;
    for (i, c) in text.char_indices() {
        if c == '\n' {
            line += 1;
        }
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        if c.is_whitespace() {
            continue;
        }
        if depth == 1 && current.is_none() && c != ']' && c != '}' && c != ',' {
            current = Some((i, line));
        }
        match c {
            '"' => in_string = true,
            '[' | '{' => depth += 1,
            ']' | '}' if depth == 1 => {
                // The end of the array (a stray '}' ends it too; the
                // element before it then fails to parse on its own).
                if let Some((start, line)) = current.take() {
                    elements.push(Element {
                        start,
                        end: i,
                        line,
                    });
                }
                return (elements, true);
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            ',' if depth == 1 => {
                if let Some((start, line)) = current.take() {
                    elements.push(Element {
                        start,
                        end: i,
                        line,
                    });
                }
            }
            _ => {}
        }
    }
    if let Some((start, line)) = current {
        elements.push(Element {
            start,
            end: text.len(),
            line,
        });
    }
    (elements, false)
}

/// A request from one JSON object: `prompt`, `messages` or `conversations`.
fn record_of_object(map: &Map<String, Value>) -> Result<DatasetRecord, String> {
    let output_len = super::length_field(map.get("output_len"))
        .map_err(|must| format!("output_len is not {must}"))?;
    let (text, messages, output_hint) = if let Some(prompt) = map.get("prompt") {
        let Some(prompt) = prompt.as_str() else {
            return Err("prompt is not a string".into());
        };
        (prompt.to_string(), None, None)
    } else if let Some(messages) = map.get("messages") {
        let messages = chat_messages(messages)
            .ok_or("messages is not a list of {\"role\", \"content\"} strings")?;
        (flatten_messages(&messages), Some(messages), None)
    } else if let Some(turns) = map.get("conversations") {
        let (prompt, hint) = sharegpt_turns(turns)?;
        (prompt, None, hint)
    } else {
        return Err("no prompt, messages or conversations".into());
    };
    if text.trim().is_empty() {
        return Err("the prompt is empty".into());
    }
    Ok(DatasetRecord {
        words: text.split_whitespace().count(),
        text,
        messages,
        output_len,
        output_hint,
    })
}

fn chat_messages(v: &Value) -> Option<Vec<ChatMessage>> {
    let list = v.as_array()?;
    if list.is_empty() {
        return None;
    }
    list.iter()
        .map(|m| {
            Some(ChatMessage {
                role: m.get("role")?.as_str()?.to_string(),
                content: m.get("content")?.as_str()?.to_string(),
            })
        })
        .collect()
}

/// ShareGPT turns: the first human turn, and the words of the first answer after it.
fn sharegpt_turns(v: &Value) -> Result<(String, Option<u32>), String> {
    let turns = v
        .as_array()
        .ok_or("conversations is not a list of {\"from\", \"value\"} turns")?;
    let speaker = |t: &Value| {
        t.get("from")
            .or_else(|| t.get("role"))
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase)
    };
    fn value(t: &Value) -> Option<&str> {
        t.get("value").or_else(|| t.get("content"))?.as_str()
    }
    let Some(first) = turns
        .iter()
        .position(|t| matches!(speaker(t).as_deref(), Some("human" | "user")))
    else {
        return Err("conversations has no human turn".into());
    };
    let prompt = value(&turns[first]).ok_or("the first human turn has no string value")?;
    let hint = turns[first + 1..]
        .iter()
        .find(|t| matches!(speaker(t).as_deref(), Some("gpt" | "assistant" | "chatgpt")))
        .and_then(value)
        .map(|answer| answer.split_whitespace().count() as u32)
        .filter(|&n| n > 0);
    Ok((prompt.to_string(), hint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/datasets")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn bad_lines_are_reported_by_number_and_skipped() {
        // bad.jsonl: line 2 is not JSON, line 4 a truncated array, line 6
        // has a number for a prompt; lines 1, 3, 5 and 7 are usable and
        // line 8 is blank.
        let d = Dataset::parse(&fixture("bad.jsonl"), "bad.jsonl").expect("parses");
        let lines: Vec<usize> = d.skipped.iter().map(|s| s.line).collect();
        assert_eq!(lines, vec![2, 4, 6], "{:?}", d.skipped);
        assert_eq!(d.skipped[0].reason, "not valid JSON");
        assert_eq!(d.skipped[1].reason, "not valid JSON");
        assert_eq!(d.skipped[2].reason, "prompt is not a string");
        assert_eq!(d.records.len(), 4);
        let json = d.to_json();
        assert_eq!(json["skipped_lines"][2]["line"], 6);
        assert_eq!(json["records"], 4);
    }

    #[test]
    fn an_output_len_out_of_range_skips_its_line() {
        let text = "{\"prompt\": \"a b\", \"output_len\": 0}\n\
                    {\"prompt\": \"a b\", \"output_len\": 10000001}\n\
                    {\"prompt\": \"a b\", \"output_len\": 2.5}\n\
                    {\"prompt\": \"a b\", \"output_len\": 10000000}\n\
                    {\"prompt\": \"a b\", \"output_len\": null}\n";
        let d = Dataset::parse(text, "lens.jsonl").expect("parses");
        let skipped: Vec<(usize, &str)> = d
            .skipped
            .iter()
            .map(|s| (s.line, s.reason.as_str()))
            .collect();
        let why = "output_len is not a whole number from 1 to 10,000,000";
        assert_eq!(skipped, [(1, why), (2, why), (3, why)]);
        let lens: Vec<Option<u32>> = d.records.iter().map(|r| r.output_len).collect();
        assert_eq!(lens, [Some(10_000_000), None]);
    }

    #[test]
    fn jsonl_prompts_messages_and_output_len() {
        let d = Dataset::parse(&fixture("requests.jsonl"), "requests.jsonl").expect("parses");
        assert_eq!(d.format, DatasetFormat::Jsonl);
        assert!(d.skipped.is_empty(), "{:?}", d.skipped);
        assert_eq!(d.records.len(), 6);
        let first = &d.records[0];
        assert!(first.messages.is_none());
        assert_eq!(first.output_len, Some(32));
        assert_eq!(first.words, first.text.split_whitespace().count());
        let chat = d
            .records
            .iter()
            .find(|r| r.messages.is_some())
            .expect("a messages record");
        let messages = chat.messages.as_ref().unwrap();
        assert_eq!(messages[0].role, "system");
        assert!(chat.text.starts_with("system: "));
        assert!(chat.text.contains("\nuser: "));
    }

    #[test]
    fn sharegpt_first_human_turn_and_answer_hint() {
        let d = Dataset::parse(&fixture("sharegpt.json"), "sharegpt.json").expect("parses");
        assert_eq!(d.format, DatasetFormat::ShareGpt);
        // Entry 3 has no human turn: skipped, reported at the line it opens on.
        assert_eq!(d.records.len(), 3);
        assert_eq!(d.skipped.len(), 1, "{:?}", d.skipped);
        assert_eq!(
            d.skipped[0].reason,
            "entry 3: conversations has no human turn"
        );
        let text = fixture("sharegpt.json");
        let entry3_line = text
            .lines()
            .position(|l| l.contains("\"id\": \"no-human\""))
            .expect("fixture entry")
            // The entry's `{` is the line before its id.
            ;
        assert_eq!(d.skipped[0].line, entry3_line);
        let first = &d.records[0];
        assert_eq!(
            first.text,
            "Explain why the sky looks blue on a clear afternoon."
        );
        // "Sunlight scatters off air molecules, and blue light scatters most." = 10 words.
        assert_eq!(first.output_hint, Some(10));
        assert!(first.messages.is_none());
    }

    #[test]
    fn odd_input_never_panics() {
        for text in [
            "",
            "\n\n",
            "[]",
            "{}",
            "null",
            "[1, \"a\", null]",
            "{\"prompt\": \"\"}",
            "{\"messages\": []}",
            "{\"messages\": [{\"role\": \"user\"}]}",
            "{\"prompt\": \"hi\", \"output_len\": -3}",
            "{\"conversations\": 5}",
            "\u{feff}{\"prompt\": \"with a byte order mark\"}",
        ] {
            let _ = Dataset::parse(text, "x");
        }
        let d = Dataset::parse("{\"prompt\": \"hi\", \"output_len\": 0}\n", "x").unwrap();
        assert_eq!(d.skipped.len(), 1);
        let d = Dataset::parse("\u{feff}{\"prompt\": \"a b\"}", "x").unwrap();
        assert_eq!(d.records.len(), 1);
        // A cut-off ShareGPT file: the entry it ends in is skipped, not the file.
        let d = Dataset::parse("[{\"conversations\": [", "x").unwrap();
        assert_eq!(
            d.skipped,
            vec![SkippedLine {
                line: 1,
                reason: "entry 1: not valid JSON (the file ends inside this entry)".into()
            }]
        );
    }

    #[test]
    fn elements_follow_strings_and_nesting() {
        let text = "[\n  {\"a\": \"x,\\\"]\"},\n  {\"b\": [1,\n 2]}, 3\n]";
        let (elements, closed) = top_level_elements(text);
        assert!(closed);
        let lines: Vec<usize> = elements.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![2, 3, 4]);
        let slices: Vec<&str> = elements
            .iter()
            .map(|e| text[e.start..e.end].trim_end())
            .collect();
        assert_eq!(
            slices,
            vec!["{\"a\": \"x,\\\"]\"}", "{\"b\": [1,\n 2]}", "3"]
        );
        assert_eq!(top_level_elements("[]"), (Vec::new(), true));
        assert!(!top_level_elements("[ ").1);
    }

    #[test]
    fn a_cut_off_sharegpt_file_keeps_its_whole_entries() {
        // Cut inside entry 4 ("maps"): entries 1 and 2 are used, 3 has no
        // human turn, 4 is cut off.
        let text = fixture("sharegpt.json");
        let cut = &text[..text.find("sea monsters").expect("fixture")];
        let d = Dataset::parse(cut, "cut.json").expect("parses");
        assert_eq!(d.records.len(), 2);
        let reasons: Vec<&str> = d.skipped.iter().map(|s| s.reason.as_str()).collect();
        assert_eq!(
            reasons,
            vec![
                "entry 3: conversations has no human turn",
                "entry 4: not valid JSON (the file ends inside this entry)"
            ]
        );
        assert_eq!(d.skipped[1].line, 25);
    }
}
