"""pass@1 by cycle with error bars, as a small SVG (no plotting library; the Prefect UI shows it as an image).

Each point is one cycle's eval; its bar is ±1 standard error of that pass@1,
so two bars that overlap are within noise of each other (the paired
comparison in the table beside it is the sharper test).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape

from mindforge.eval.records import EvalResult

W, H, LEFT, RIGHT, TOP, BOTTOM = 560, 300, 56, 20, 36, 44


def svg(results: Sequence[EvalResult], title: str) -> str:
    if not results:
        raise ValueError("no eval to chart")
    hi = max(r.pass_at_1 + r.se for r in results)
    top = max(0.05, min(1.0, hi * 1.25))
    xs = [LEFT + (W - LEFT - RIGHT) * (i + 0.5) / len(results) for i in range(len(results))]

    def y(v: float) -> float:
        return TOP + (H - TOP - BOTTOM) * (1 - min(max(v, 0.0), top) / top)

    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
             'font-family="sans-serif" font-size="12">'),
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
             f'<line x1="{LEFT}" y1="{y(0)}" x2="{W - RIGHT}" y2="{y(0)}" stroke="#888"/>',
             f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{y(0)}" stroke="#888"/>']
    for tick in (0.0, top / 2, top):
        parts.append(f'<text x="{LEFT - 6}" y="{y(tick) + 4}" text-anchor="end">{tick:.2f}</text>')
    parts.append(f'<text x="14" y="{(TOP + H - BOTTOM) / 2}" transform="rotate(-90 14 {(TOP + H - BOTTOM) / 2})" '
                 'text-anchor="middle">pass@1 (±1 SE)</text>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y(r.pass_at_1):.1f}" for i, (x, r) in
                    enumerate(zip(xs, results, strict=True)))
    parts.append(f'<path d="{path}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for x, r in zip(xs, results, strict=True):
        lo, up = y(r.pass_at_1 - r.se), y(r.pass_at_1 + r.se)
        parts += [f'<line x1="{x:.1f}" y1="{lo:.1f}" x2="{x:.1f}" y2="{up:.1f}" stroke="#1f77b4"/>',
                  f'<line x1="{x - 5:.1f}" y1="{lo:.1f}" x2="{x + 5:.1f}" y2="{lo:.1f}" stroke="#1f77b4"/>',
                  f'<line x1="{x - 5:.1f}" y1="{up:.1f}" x2="{x + 5:.1f}" y2="{up:.1f}" stroke="#1f77b4"/>',
                  f'<circle cx="{x:.1f}" cy="{y(r.pass_at_1):.1f}" r="4" fill="#1f77b4"/>',
                  f'<text x="{x:.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">cycle {r.cycle}</text>',
                  f'<text x="{x:.1f}" y="{up - 6:.1f}" text-anchor="middle">{r.pass_at_1:.3f}</text>']
    parts.append("</svg>")
    return "".join(parts)


def data_url(results: Sequence[EvalResult], title: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg(results, title).encode()).decode()
