//! Colours of the live view.
//!
//! Over SSH the remote side rarely knows what the local terminal can show,
//! so the default is the 16 ANSI colours every terminal maps to its own
//! palette; RGB only when `COLORTERM` says the terminal takes it; nothing but
//! bold, dim and reverse when `NO_COLOR` is set (<https://no-color.org>).
//! Every meaning carried by a colour is also carried by a glyph or a word,
//! so the no-colour screen loses nothing.

use ratatui::style::{Color, Modifier, Style};

/// What the terminal may be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColorMode {
    /// Modifiers only.
    None,
    /// The 16 ANSI colours.
    Ansi16,
    /// 24-bit RGB.
    TrueColor,
}

impl ColorMode {
    /// From the environment's `NO_COLOR` and `COLORTERM` values. `NO_COLOR`
    /// counts when set to anything but the empty string, as the convention says.
    pub(crate) fn from_vars(no_color: Option<&str>, colorterm: Option<&str>) -> ColorMode {
        if no_color.is_some_and(|v| !v.is_empty()) {
            ColorMode::None
        } else if colorterm
            .is_some_and(|v| v.eq_ignore_ascii_case("truecolor") || v.eq_ignore_ascii_case("24bit"))
        {
            ColorMode::TrueColor
        } else {
            ColorMode::Ansi16
        }
    }

    pub(crate) fn from_env() -> ColorMode {
        let no_color = std::env::var("NO_COLOR").ok();
        let colorterm = std::env::var("COLORTERM").ok();
        ColorMode::from_vars(no_color.as_deref(), colorterm.as_deref())
    }
}

/// The styles every part of the screen draws with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Palette {
    pub mode: ColorMode,
    /// Plain text.
    pub text: Style,
    /// Labels and secondary figures.
    pub dim: Style,
    /// Figures the eye should find first.
    pub strong: Style,
    /// Panel borders.
    pub border: Style,
    /// Panel titles.
    pub title: Style,
    /// The product name in the header.
    pub brand: Style,
    /// SIMULATED SERVER.
    pub badge_sim: Style,
    /// MANUAL.
    pub badge_manual: Style,
    /// PAUSED.
    pub badge_paused: Style,
    /// PLANNED, and the finished state.
    pub badge_plan: Style,
    /// TTFT bars.
    pub ttft: Style,
    /// ITL bars.
    pub itl: Style,
    /// Concurrency-change markers in the sparklines.
    pub marker: Style,
    /// Finished planned levels on the chart.
    pub point_planned: Style,
    /// Manual levels on the chart.
    pub point_manual: Style,
    /// The running level on the chart and in the table.
    pub running: Style,
    /// The p99 TTFT series on the chart.
    pub p99: Style,
    /// The second run's levels on the chart (`tokbench view A B`).
    pub point_b: Style,
    /// The second run's p99 TTFT series.
    pub p99_b: Style,
    /// A run's third and fourth series on the chart.
    pub point_c: Style,
    pub point_d: Style,
    /// Gauge fill.
    pub gauge: Style,
    /// Counts of failures, when not zero.
    pub bad: Style,
    /// Success counts.
    pub good: Style,
    /// Keys in the footer and the help.
    pub key: Style,
    /// Table header.
    pub header: Style,
    /// The capacity row's word.
    pub capacity: Style,
    /// The knee row's word.
    pub knee: Style,
}

impl Palette {
    pub fn new(mode: ColorMode) -> Palette {
        let plain = Style::default();
        let bold = plain.add_modifier(Modifier::BOLD);
        let dim = plain.add_modifier(Modifier::DIM);
        let reverse = bold.add_modifier(Modifier::REVERSED);
        match mode {
            ColorMode::None => Palette {
                mode,
                text: plain,
                dim,
                strong: bold,
                border: plain,
                title: bold,
                brand: bold,
                badge_sim: reverse,
                badge_manual: reverse,
                badge_paused: reverse,
                badge_plan: bold,
                ttft: plain,
                itl: plain,
                marker: bold,
                point_planned: bold,
                point_manual: bold,
                running: reverse,
                p99: plain,
                point_b: bold,
                p99_b: plain,
                point_c: bold,
                point_d: bold,
                gauge: plain,
                bad: bold,
                good: plain,
                key: bold,
                header: plain.add_modifier(Modifier::UNDERLINED),
                capacity: bold.add_modifier(Modifier::UNDERLINED),
                knee: bold,
            },
            ColorMode::Ansi16 => {
                let fg = |c: Color| plain.fg(c);
                let badge = |c: Color| bold.fg(Color::Black).bg(c);
                Palette {
                    mode,
                    text: plain,
                    dim: fg(Color::DarkGray),
                    strong: bold,
                    border: fg(Color::DarkGray),
                    title: bold.fg(Color::Cyan),
                    brand: bold.fg(Color::Cyan),
                    badge_sim: badge(Color::Magenta),
                    badge_manual: badge(Color::Yellow),
                    badge_paused: badge(Color::LightRed),
                    badge_plan: bold.fg(Color::Green),
                    ttft: fg(Color::Cyan),
                    itl: fg(Color::Blue),
                    marker: bold.fg(Color::Yellow),
                    point_planned: bold.fg(Color::Green),
                    point_manual: bold.fg(Color::Yellow),
                    running: bold.fg(Color::LightCyan),
                    p99: fg(Color::Red),
                    point_b: bold.fg(Color::LightMagenta),
                    p99_b: fg(Color::Blue),
                    point_c: bold.fg(Color::LightBlue),
                    point_d: bold.fg(Color::White),
                    gauge: fg(Color::Green),
                    bad: bold.fg(Color::LightRed),
                    good: fg(Color::Green),
                    key: bold.fg(Color::Cyan),
                    header: bold.fg(Color::Gray),
                    capacity: bold.fg(Color::LightGreen),
                    knee: bold.fg(Color::Yellow),
                }
            }
            ColorMode::TrueColor => {
                let rgb = |r, g, b| plain.fg(Color::Rgb(r, g, b));
                let badge = |r, g, b| bold.fg(Color::Rgb(20, 20, 20)).bg(Color::Rgb(r, g, b));
                Palette {
                    mode,
                    text: plain,
                    dim: rgb(128, 128, 140),
                    strong: bold,
                    border: rgb(88, 92, 110),
                    title: bold.fg(Color::Rgb(120, 200, 230)),
                    brand: bold.fg(Color::Rgb(120, 200, 230)),
                    badge_sim: badge(210, 140, 230),
                    badge_manual: badge(240, 200, 90),
                    badge_paused: badge(240, 120, 110),
                    badge_plan: bold.fg(Color::Rgb(130, 210, 130)),
                    ttft: rgb(110, 190, 230),
                    itl: rgb(140, 150, 240),
                    marker: bold.fg(Color::Rgb(240, 200, 90)),
                    point_planned: bold.fg(Color::Rgb(130, 210, 130)),
                    point_manual: bold.fg(Color::Rgb(240, 200, 90)),
                    running: bold.fg(Color::Rgb(150, 230, 255)),
                    p99: rgb(235, 110, 100),
                    point_b: bold.fg(Color::Rgb(215, 140, 235)),
                    p99_b: rgb(120, 150, 240),
                    point_c: bold.fg(Color::Rgb(110, 170, 255)),
                    point_d: bold.fg(Color::Rgb(235, 235, 235)),
                    gauge: rgb(130, 210, 130),
                    bad: bold.fg(Color::Rgb(240, 120, 110)),
                    good: rgb(130, 210, 130),
                    key: bold.fg(Color::Rgb(120, 200, 230)),
                    header: bold.fg(Color::Rgb(190, 190, 200)),
                    capacity: bold.fg(Color::Rgb(150, 240, 150)),
                    knee: bold.fg(Color::Rgb(240, 200, 90)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_from_environment_values() {
        assert_eq!(ColorMode::from_vars(None, None), ColorMode::Ansi16);
        assert_eq!(
            ColorMode::from_vars(Some("1"), Some("truecolor")),
            ColorMode::None
        );
        // An empty NO_COLOR does not count (no-color.org).
        assert_eq!(ColorMode::from_vars(Some(""), None), ColorMode::Ansi16);
        assert_eq!(
            ColorMode::from_vars(None, Some("truecolor")),
            ColorMode::TrueColor
        );
        assert_eq!(
            ColorMode::from_vars(None, Some("24bit")),
            ColorMode::TrueColor
        );
        assert_eq!(ColorMode::from_vars(None, Some("yes")), ColorMode::Ansi16);
    }

    /// Only the 16 ANSI colours unless the terminal said it takes RGB, and
    /// none at all under NO_COLOR.
    #[test]
    fn palettes_keep_to_their_colours() {
        let styles = |p: Palette| {
            [
                p.text,
                p.dim,
                p.strong,
                p.border,
                p.title,
                p.brand,
                p.badge_sim,
                p.badge_manual,
                p.badge_paused,
                p.badge_plan,
                p.ttft,
                p.itl,
                p.marker,
                p.point_planned,
                p.point_manual,
                p.running,
                p.p99,
                p.point_b,
                p.p99_b,
                p.gauge,
                p.bad,
                p.good,
                p.key,
                p.header,
                p.capacity,
                p.knee,
            ]
        };
        for s in styles(Palette::new(ColorMode::None)) {
            assert_eq!((s.fg, s.bg), (None, None), "{s:?}");
        }
        for s in styles(Palette::new(ColorMode::Ansi16)) {
            for c in [s.fg, s.bg].into_iter().flatten() {
                assert!(!matches!(c, Color::Rgb(..) | Color::Indexed(_)), "{c:?}");
            }
        }
    }
}
