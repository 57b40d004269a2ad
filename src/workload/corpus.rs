//! `--prompt-source corpus --corpus FILE`: prompts cut from a text the user
//! gives (a book, documentation, logs), so the server tokenizes real text.
//! Each prompt is a run of whole words starting at a random word of the
//! file, wrapping around to the start when it reaches the end.

use std::path::Path;

use super::rng::Rng;

/// A text file split into words (white space collapsed to single spaces).
#[derive(Clone, Debug, PartialEq)]
pub struct Corpus {
    /// The file name (not the full path), for result files.
    pub name: String,
    words: Vec<String>,
}

impl Corpus {
    /// Read a corpus file. Errors when it cannot be read or has no words.
    pub(crate) fn load(path: &Path) -> Result<Corpus, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read the corpus {}: {e}", path.display()))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        Corpus::from_text(&String::from_utf8_lossy(&bytes), &name)
            .ok_or_else(|| format!("the corpus {} has no words", path.display()))
    }

    /// A corpus of this text; `None` when it has no words.
    pub(crate) fn from_text(text: &str, name: &str) -> Option<Corpus> {
        let words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
        (!words.is_empty()).then(|| Corpus {
            name: name.to_string(),
            words,
        })
    }

    #[cfg(test)]
    pub(crate) fn word_count(&self) -> usize {
        self.words.len()
    }

    /// Append `n` words from a random word on, wrapping around, each
    /// preceded by a space.
    pub(crate) fn push_words(&self, rng: &mut Rng, text: &mut String, n: usize) {
        let start = rng.below(self.words.len());
        for word in self.words.iter().cycle().skip(start).take(n) {
            text.push(' ');
            text.push_str(word);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_whole_words_and_wraps() {
        let c = Corpus::from_text("one two\nthree   four five", "c.txt").expect("words");
        assert_eq!(c.word_count(), 5);
        let mut rng = Rng::new(3);
        for _ in 0..50 {
            let mut text = String::new();
            c.push_words(&mut rng, &mut text, 12);
            let words: Vec<&str> = text.split_whitespace().collect();
            assert_eq!(words.len(), 12);
            // Consecutive words of the file, wrapping: each follows the one before.
            let order = ["one", "two", "three", "four", "five"];
            for pair in words.windows(2) {
                let i = order
                    .iter()
                    .position(|w| *w == pair[0])
                    .expect("a corpus word");
                assert_eq!(pair[1], order[(i + 1) % 5], "{text}");
            }
        }
        assert!(Corpus::from_text(" \n\t", "empty").is_none());
    }
}
