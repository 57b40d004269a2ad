//! Judgements over measured levels: what to warn the user about.
//! Pure functions of the numbers; nothing here measures or prints.

pub mod diagnose;
