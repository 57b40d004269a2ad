#!/usr/bin/env python3
"""Render a terminal capture (`tmux capture-pane -e -p`) as a PNG.

Usage: ansi2png.py CAPTURE.ansi WIDTH HEIGHT OUT.png

Writes an ImageMagick MVG drawing and runs ImageMagick's `convert` on it
(apt-get install imagemagick). Text is drawn one cell at a time in DejaVu
Sans Mono; block elements, box drawing, braille and the star are drawn as shapes, so
bars meet and lines join the way they do in a terminal, whatever the font
has. Colours: the 16 ANSI colours in the Tomorrow Night palette, the 256-
colour cube and 24-bit RGB as given.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

CELL_W, CELL_H = 10, 20
FONT_SIZE = 16
BASELINE = 15
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
FONT_BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf"
FONT_FALLBACK = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

DEFAULT_FG = (0xC5, 0xC8, 0xC6)
DEFAULT_BG = (0x1D, 0x1F, 0x21)
ANSI = [
    (0x1D, 0x1F, 0x21), (0xCC, 0x66, 0x66), (0xB5, 0xBD, 0x68), (0xF0, 0xC6, 0x74),
    (0x81, 0xA2, 0xBE), (0xB2, 0x94, 0xBB), (0x8A, 0xBE, 0xB7), (0xC5, 0xC8, 0xC6),
    (0x70, 0x72, 0x74), (0xD5, 0x4E, 0x53), (0xB9, 0xCA, 0x4A), (0xE7, 0xC5, 0x47),
    (0x7A, 0xA6, 0xDA), (0xC3, 0x97, 0xD8), (0x70, 0xC0, 0xB1), (0xEA, 0xEA, 0xEA),
]


def color256(n):
    if n < 16:
        return ANSI[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return (steps[n // 36], steps[(n // 6) % 6], steps[n % 6])
    v = 8 + 10 * (n - 232)
    return (v, v, v)


class Style:
    def __init__(self):
        self.reset()

    def reset(self):
        self.fg = None
        self.bg = None
        self.bold = False
        self.dim = False
        self.reverse = False
        self.underline = False

    def copy(self):
        s = Style()
        s.__dict__.update(self.__dict__)
        return s

    def apply(self, params):
        i = 0
        while i < len(params):
            p = params[i]
            if p == 0:
                self.reset()
            elif p == 1:
                self.bold = True
            elif p == 2:
                self.dim = True
            elif p == 4:
                self.underline = True
            elif p == 7:
                self.reverse = True
            elif p == 22:
                self.bold = self.dim = False
            elif p == 24:
                self.underline = False
            elif p == 27:
                self.reverse = False
            elif 30 <= p <= 37:
                self.fg = ANSI[p - 30]
            elif 90 <= p <= 97:
                self.fg = ANSI[p - 90 + 8]
            elif 40 <= p <= 47:
                self.bg = ANSI[p - 40]
            elif 100 <= p <= 107:
                self.bg = ANSI[p - 100 + 8]
            elif p == 39:
                self.fg = None
            elif p == 49:
                self.bg = None
            elif p in (38, 48) and i + 1 < len(params):
                if params[i + 1] == 5 and i + 2 < len(params):
                    c = color256(params[i + 2])
                    i += 2
                elif params[i + 1] == 2 and i + 4 < len(params):
                    c = tuple(params[i + 2:i + 5])
                    i += 4
                else:
                    c = None
                if p == 38:
                    self.fg = c
                else:
                    self.bg = c
            i += 1

    def colors(self):
        fg = self.fg or DEFAULT_FG
        bg = self.bg or DEFAULT_BG
        if self.reverse:
            fg, bg = bg, fg
        if self.dim:
            fg = blend(fg, bg, 0.55)
        return fg, bg


def blend(a, b, t):
    return tuple(round(x * t + y * (1 - t)) for x, y in zip(a, b))


def hexc(c):
    return "#%02x%02x%02x" % c


SGR = re.compile(r"\x1b\[([0-9;]*)m")


def parse(text, width, height):
    grid = [[(" ", Style()) for _ in range(width)] for _ in range(height)]
    style = Style()
    for y, line in enumerate(text.split("\n")[:height]):
        x = 0
        pos = 0
        while pos < len(line):
            m = SGR.match(line, pos)
            if m:
                params = [int(p) if p else 0 for p in m.group(1).split(";")] if m.group(1) else [0]
                style.apply(params)
                pos = m.end()
                continue
            ch = line[pos]
            pos += 1
            if ch == "\x1b":
                continue
            if x < width:
                grid[y][x] = (ch, style.copy())
            x += 1
    return grid


# Box drawing: (up, down, left, right) arms; 2 = double.
BOX = {
    "─": (0, 0, 1, 1), "│": (1, 1, 0, 0), "┌": (0, 1, 0, 1), "┐": (0, 1, 1, 0),
    "└": (1, 0, 0, 1), "┘": (1, 0, 1, 0), "├": (1, 1, 0, 1), "┤": (1, 1, 1, 0),
    "┬": (0, 1, 1, 1), "┴": (1, 0, 1, 1), "┼": (1, 1, 1, 1),
    "╭": (0, 1, 0, 1), "╮": (0, 1, 1, 0), "╰": (1, 0, 0, 1), "╯": (1, 0, 1, 0),
    "═": (0, 0, 2, 2), "║": (2, 2, 0, 0), "╔": (0, 2, 0, 2), "╗": (0, 2, 2, 0),
    "╚": (2, 0, 0, 2), "╝": (2, 0, 2, 0),
}
ROUNDED = set("╭╮╰╯")


def shapes(ch, x0, y0, fg, bg):
    """MVG primitives for a glyph drawn as shapes, or None for text."""
    out = []
    cw, chh = CELL_W, CELL_H
    fill = hexc(fg)
    code = ord(ch)
    if ch == "█":
        out.append(f"fill '{fill}' rectangle {x0},{y0} {x0 + cw - 1},{y0 + chh - 1}")
    elif 0x2581 <= code <= 0x2587:  # lower eighths
        n = code - 0x2580
        top = y0 + chh - round(chh * n / 8)
        out.append(f"fill '{fill}' rectangle {x0},{top} {x0 + cw - 1},{y0 + chh - 1}")
    elif ch == "▀":
        out.append(f"fill '{fill}' rectangle {x0},{y0} {x0 + cw - 1},{y0 + chh // 2 - 1}")
    elif ch in "░▒▓":
        t = {"░": 0.25, "▒": 0.5, "▓": 0.75}[ch]
        out.append(f"fill '{hexc(blend(fg, bg, t))}' rectangle {x0},{y0} {x0 + cw - 1},{y0 + chh - 1}")
    elif 0x2800 <= code <= 0x28FF:
        bits = code - 0x2800
        dots = [(0, 0, 0x01), (0, 1, 0x02), (0, 2, 0x04), (1, 0, 0x08),
                (1, 1, 0x10), (1, 2, 0x20), (0, 3, 0x40), (1, 3, 0x80)]
        for dx, dy, bit in dots:
            if bits & bit:
                cx = x0 + (0.3 + 0.4 * dx) * cw
                cy = y0 + (0.125 + 0.25 * dy) * chh
                out.append(f"fill '{fill}' circle {cx:.1f},{cy:.1f} {cx + 1.3:.1f},{cy:.1f}")
    elif ch == "★":
        # Not in the bold font: drawn, as large as the dots beside it.
        import math
        cx, cy = x0 + cw / 2, y0 + chh / 2 + 0.5
        outer, inner = cw * 0.58, cw * 0.24
        pts = []
        for k in range(10):
            r = outer if k % 2 == 0 else inner
            a = -math.pi / 2 + k * math.pi / 5
            pts.append(f"{cx + r * math.cos(a):.1f},{cy + r * math.sin(a):.1f}")
        out.append(f"fill '{fill}' polygon " + " ".join(pts))
    elif ch in BOX:
        up, down, left, right = BOX[ch]
        mx, my = x0 + cw // 2, y0 + chh // 2
        out.append(f"stroke '{fill}' stroke-width 1 fill none")
        if ch in ROUNDED:
            # A quarter circle from the arm's edge to the other arm's edge.
            r = min(cw, chh) // 2
            if ch == "╭":
                out.append(f"path 'M {mx},{y0 + chh} L {mx},{my + r} Q {mx},{my} {mx + r},{my} L {x0 + cw},{my}'")
            elif ch == "╮":
                out.append(f"path 'M {mx},{y0 + chh} L {mx},{my + r} Q {mx},{my} {mx - r},{my} L {x0},{my}'")
            elif ch == "╰":
                out.append(f"path 'M {mx},{y0} L {mx},{my - r} Q {mx},{my} {mx + r},{my} L {x0 + cw},{my}'")
            else:
                out.append(f"path 'M {mx},{y0} L {mx},{my - r} Q {mx},{my} {mx - r},{my} L {x0},{my}'")
        else:
            for arm, (ax, ay) in zip((up, down, left, right), ((mx, y0), (mx, y0 + chh), (x0, my), (x0 + cw, my))):
                if not arm:
                    continue
                offsets = (0,) if arm == 1 else (-2, 2)
                for o in offsets:
                    if ax == mx:
                        out.append(f"line {mx + o},{my} {ax + o},{ay}")
                    else:
                        out.append(f"line {mx},{my + o} {ax},{ay + o}")
        out.append("stroke none")
    else:
        return None
    return out


def escape(ch):
    return ch.replace("\\", "\\\\").replace("'", "\\'")


def main():
    src, width, height, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with open(src, encoding="utf-8", errors="replace") as f:
        grid = parse(f.read(), width, height)
    pad = 12
    W, H = width * CELL_W + 2 * pad, height * CELL_H + 2 * pad
    mvg = [f"viewbox 0 0 {W} {H}", f"fill '{hexc(DEFAULT_BG)}' rectangle 0,0 {W},{H}",
           f"font-size {FONT_SIZE}", "stroke none"]
    for y, row in enumerate(grid):
        for x, (ch, style) in enumerate(row):
            fg, bg = style.colors()
            x0, y0 = pad + x * CELL_W, pad + y * CELL_H
            if bg != DEFAULT_BG:
                mvg.append(f"fill '{hexc(bg)}' rectangle {x0},{y0} {x0 + CELL_W - 1},{y0 + CELL_H - 1}")
            if ch == " ":
                continue
            drawn = shapes(ch, x0, y0, fg, bg)
            if drawn is not None:
                mvg.extend(drawn)
                continue
            font = FONT_BOLD if style.bold else FONT
            mvg.append(f"font '{font}'")
            mvg.append(f"fill '{hexc(fg)}' text {x0},{y0 + BASELINE} '{escape(ch)}'")
            if style.underline:
                mvg.append(f"fill '{hexc(fg)}' rectangle {x0},{y0 + CELL_H - 3} {x0 + CELL_W - 1},{y0 + CELL_H - 3}")
    convert = shutil.which("convert-im6.q16") or shutil.which("magick") or "convert"
    with tempfile.NamedTemporaryFile("w", suffix=".mvg", delete=False, encoding="utf-8") as f:
        f.write("\n".join(mvg) + "\n")
        path = f.name
    try:
        subprocess.run([convert, f"mvg:{path}", out], check=True)
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
