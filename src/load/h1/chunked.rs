//! The `chunked` transfer coding.

use super::*;

/// The `chunked` transfer coding, decoded a byte at a time for its framing
/// and a slice at a time for its data, so a chunk split across reads (or a
/// read holding many chunks) needs no copy.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Chunked {
    pub(super) state: ChunkState,
    pub(super) size: u64,
    pub(super) digits: u8,
}

#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub(super) enum ChunkState {
    /// Hex digits of the next chunk's size.
    #[default]
    Size,
    /// A chunk extension (`;name=value`) up to the line's end.
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// At the start of a trailer line (after the last, zero-size chunk).
    TrailerStart,
    TrailerLine,
    EndLf,
    Done,
}

impl Chunked {
    /// Decode `input`, giving each run of data bytes to `sink`. Returns the
    /// bytes after the body's end (normally none) and whether it ended.
    pub(crate) fn decode<'a, E>(
        &mut self,
        input: &'a [u8],
        sink: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(&'a [u8], bool), BodyError<E>> {
        let bad = |what: &str| {
            BodyError::Transport(H1Error::new(
                ErrorClass::MalformedStream,
                format!("invalid chunked encoding ({what})"),
            ))
        };
        let mut i = 0;
        while i < input.len() {
            if self.state == ChunkState::Data {
                let left = usize::try_from(self.size).unwrap_or(usize::MAX);
                let take = left.min(input.len() - i);
                sink(&input[i..i + take]).map_err(BodyError::Sink)?;
                i += take;
                self.size -= take as u64;
                if self.size == 0 {
                    self.state = ChunkState::DataCr;
                }
                continue;
            }
            let b = input[i];
            i += 1;
            self.state = match (self.state, b) {
                (ChunkState::Size, b) if b.is_ascii_hexdigit() => {
                    if self.digits == 15 {
                        return Err(bad("chunk size too large"));
                    }
                    self.digits += 1;
                    self.size = self.size * 16 + u64::from((b as char).to_digit(16).unwrap_or(0));
                    ChunkState::Size
                }
                (ChunkState::Size, b';' | b' ' | b'\t') if self.digits > 0 => ChunkState::Extension,
                (ChunkState::Size, b'\r') if self.digits > 0 => ChunkState::SizeLf,
                (ChunkState::Size, b'\n') if self.digits > 0 => self.after_size(),
                (ChunkState::Size, _) => return Err(bad("no chunk size")),
                (ChunkState::Extension, b'\r') => ChunkState::SizeLf,
                (ChunkState::Extension, b'\n') => self.after_size(),
                (ChunkState::Extension, _) => ChunkState::Extension,
                (ChunkState::SizeLf, b'\n') => self.after_size(),
                (ChunkState::SizeLf, _) => return Err(bad("no line feed after the size")),
                (ChunkState::DataCr, b'\r') => ChunkState::DataLf,
                (ChunkState::DataCr, b'\n') | (ChunkState::DataLf, b'\n') => ChunkState::Size,
                (ChunkState::DataCr | ChunkState::DataLf, _) => {
                    return Err(bad("chunk longer than its size"))
                }
                (ChunkState::TrailerStart, b'\r') => ChunkState::EndLf,
                (ChunkState::TrailerStart, b'\n') | (ChunkState::EndLf, b'\n') => {
                    self.state = ChunkState::Done;
                    return Ok((&input[i..], true));
                }
                (ChunkState::EndLf, _) => return Err(bad("no line feed at the end")),
                (ChunkState::TrailerLine, b'\n') => ChunkState::TrailerStart,
                (ChunkState::TrailerStart | ChunkState::TrailerLine, _) => ChunkState::TrailerLine,
                (ChunkState::Data, _) => ChunkState::Data,
                (ChunkState::Done, _) => return Ok((&input[i - 1..], true)),
            };
        }
        Ok((&[], self.state == ChunkState::Done))
    }

    /// The size line is over: data, or the trailer after the last chunk.
    pub(super) fn after_size(&mut self) -> ChunkState {
        let state = if self.size == 0 {
            ChunkState::TrailerStart
        } else {
            ChunkState::Data
        };
        self.digits = 0;
        state
    }
}
