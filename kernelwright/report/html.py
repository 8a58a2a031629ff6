"""``kw report``: one self-contained HTML file (inline CSS and SVG, no scripts, no network) for a run.

Per family: the ladder table at each (dtype, size) (rung, time, achieved rate, % of roofline, speedup vs the
rung below and vs torch, and the journal entry), a roofline chart (arithmetic intensity vs achieved FLOP/s
under the measured ceilings), and a size-scaling chart (achieved bandwidth vs problem size).
"""

from __future__ import annotations

from collections import defaultdict
from html import escape

from kernelwright.registry import FAMILY_MODULES, get_family
from kernelwright.report.svg import PALETTE, Axis, Series, chart

CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f3f3f3} td.l,th.l{text-align:left} td.j{text-align:left;max-width:520px;font-size:12px;color:#444}
tr.peer td{background:#fafafa;color:#555} .bad{color:#b00} .meta{font-size:13px;color:#444}
.charts{display:flex;flex-wrap:wrap;gap:1em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em}
details{margin-bottom:1em}
"""


def _f(v, fmt="{:.3g}", none="–"):
    return none if v is None else fmt.format(v)


def render(run: dict, rows: list[dict]) -> str:
    ceil = run.get("ceilings") or {}
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>kernelwright report: run {run['id']}</title><style>{CSS}</style></head><body>",
        f"<h1>kernelwright report — run {run['id']}</h1>",
        "<p class='meta'>"
        f"<b>{escape(str(run.get('device')))}</b> ({escape(str(run.get('device_kind')))}), "
        f"driver {escape(str(run.get('driver')))}, torch {escape(str(run.get('torch')))}, "
        f"triton {escape(str(run.get('triton')))}, python {escape(str(run.get('python')))}<br>"
        f"commit {escape(str(run.get('git_commit')))}{' (dirty)' if run.get('git_dirty') else ''}, "
        f"started {escape(str(run.get('started_at')))}, status {escape(str(run.get('status')))}<br>",
    ]
    if ceil:
        mm = ", ".join(f"{k} {v:.1f}" for k, v in ceil.get("matmul_tflops", {}).items())
        parts.append(f"Measured ceilings: copy {ceil.get('copy_tbps', 0):.2f} TB/s (read+write); matmul TFLOP/s: "
                     f"{escape(mm)}. <i>{escape(ceil.get('method', ''))}</i></p>")
    if run.get("device_kind") == "cpu-interpreter":
        parts.append("<p class='bad'>CPU run: Triton kernels ran through the interpreter. These times show "
                     "that the code runs, not how fast a GPU runs it; they are never compared with GPU runs.</p>")
    by_family: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_family[r["family"]].append(r)
    for name in [f for f in FAMILY_MODULES if f in by_family] + [f for f in by_family if f not in FAMILY_MODULES]:
        parts.append(_family_section(name, by_family[name], ceil))
    parts.append("</body></html>")
    return "\n".join(parts)


def _journal(family_name: str) -> dict[str, str]:
    try:
        fam = get_family(family_name)
    except Exception:
        return {}
    j = {r.name: r.journal for r in fam.rungs}
    j.update({p.name: p.note for p in fam.peers})
    return j


def _family_section(name: str, rows: list[dict], ceil: dict) -> str:
    journal = _journal(name)
    out = [f"<h2 id='{escape(name)}'>{escape(name)}</h2>"]
    try:
        out.append(f"<p>{escape(get_family(name).summary)}</p>")
    except Exception:
        pass
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["dtype"], r["size"])].append(r)
    keys = sorted(groups, key=lambda k: (k[0], groups[k][0]["numel"] or 0))
    headline = {}
    for k in keys:  # per dtype, the size where the most variants ran (then the largest) opens; the others fold
        timed = sum(1 for r in groups[k] if r.get("median_ms"))
        if k[0] not in headline or timed >= headline[k[0]][1]:
            headline[k[0]] = (k, timed)
    headline = {d: k for d, (k, _) in headline.items()}
    names = list(dict.fromkeys([r["variant"] for r in rows]))
    colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    out.append("<div class='charts'>")
    out.append(_roofline_chart(name, [groups[k] for k in headline.values()], ceil, colors))
    out.append(_scaling_chart(name, rows, colors))
    out.append("</div>")
    for k in keys:
        table = _ladder_table(groups[k], journal)
        title = f"{escape(k[0])} — {escape(k[1])}"
        if headline.get(k[0]) == k:
            out.append(f"<h3>{title}</h3>{table}")
        else:
            out.append(f"<details><summary>{title}</summary>{table}</details>")
    return "\n".join(out)


def _ladder_table(rows: list[dict], journal: dict[str, str]) -> str:
    head = ("<table><tr><th class='l'>variant</th><th class='l'>kind</th><th>median</th><th>IQR</th>"
            "<th>TFLOP/s</th><th>TB/s</th><th>% roofline</th><th>vs rung below</th><th>vs torch</th>"
            "<th class='l'>timer</th><th class='l'>journal / note</th></tr>")
    body = []
    for r in rows:
        t = r.get("median_ms")
        time = "–" if t is None else (f"{t * 1e3:.1f} µs" if t < 1 else f"{t:.3f} ms")
        iqr = "–" if not r.get("iqr_ms") or not t else f"{100 * r['iqr_ms'] / t:.1f}%"
        note = r.get("note") or ""
        flags = " ⚠ throttled" if r.get("throttled") else ""
        flags += " ⚠ unsettled" if t is not None and not r.get("settled") else ""
        text = escape(journal.get(r["variant"], "")) + (f"<br><span class='bad'>{escape(note)}</span>" if note else "")
        body.append(
            f"<tr class='{r['role']}'><td class='l'><b>{escape(r['variant'])}</b></td><td class='l'>{r['role']}</td>"
            f"<td>{time}</td><td>{iqr}</td><td>{_f(r.get('tflops'))}</td><td>{_f(r.get('tbps'), '{:.3f}')}</td>"
            f"<td>{_f(r.get('pct_roofline'), '{:.1f}%')}</td><td>{_f(r.get('speedup_vs_below'), '{:.2f}x')}</td>"
            f"<td>{_f(r.get('speedup_vs_baseline'), '{:.2f}x')}</td>"
            f"<td class='l'>{escape(str(r.get('mode') or ''))}{flags}</td><td class='j'>{text}</td></tr>"
        )
    return head + "".join(body) + "</table>"


def _roofline_chart(name: str, groups: list[list[dict]], ceil: dict, colors: dict[str, str]) -> str:
    series = []
    by_variant: dict[str, Series] = {}
    for rows in groups:
        for r in rows:
            if not r.get("median_ms") or not r.get("bytes") or not r.get("flops"):
                continue
            ai = r["flops"] / r["bytes"]
            v = r["variant"]
            s = by_variant.setdefault(v, Series(v, [], line=False, color=colors.get(v)))
            s.points.append((ai, r["tflops"] * 1e12))
            s.labels.append(f"{r['variant']} {r['dtype']} {r['size']}: {r['tflops']:.3g} TFLOP/s, "
                            f"{r['pct_roofline']:.0f}% of roofline")
    series += list(by_variant.values())
    if ceil and series:
        ais = [p[0] for s in series for p in s.points]
        lo, hi = min(ais) / 4, max(max(ais) * 4, 1e3)
        bw = ceil["copy_tbps"] * 1e12
        for label, key in (("fp32 (CUDA cores)", "fp32"), ("bf16 tensor", "bf16")):
            peak = ceil.get("matmul_tflops", {}).get(key)
            if not peak:
                continue
            peak *= 1e12
            knee = peak / bw
            pts = [(lo, min(peak, bw * lo))] + ([(knee, peak)] if lo < knee < hi else []) + [(hi, min(peak, bw * hi))]
            series.append(Series(f"ceiling: {label}", pts, dashed=True, color="#999" if key == "fp32" else "#555"))
    return chart(f"{name}: roofline (one size per dtype: the table opened below)", series,
                 Axis("arithmetic intensity (FLOP / byte)"), Axis("achieved FLOP/s"))


def _scaling_chart(name: str, rows: list[dict], colors: dict[str, str]) -> str:
    from kernelwright.harness.sizes import parse_dims

    label, x_of, compute_bound, parse = "minimum bytes moved", None, False, parse_dims
    try:
        fam = get_family(name)
        if fam.scale_axis:
            label, x_of = fam.scale_axis
        compute_bound = fam.flop_unit == "tensor"  # a matmul's scaling is told in FLOP/s, not bytes
        parse = fam.parse_size  # the family's own size syntax (attention's "BxHqxHkvxSqxSkvxD:causal")
    except Exception:
        pass
    key, unit, fmt = ("tflops", "TFLOP/s", "{:.1f}") if compute_bound else ("tbps", "TB/s", "{:.3f}")
    dtypes = sorted({r["dtype"] for r in rows if r.get("median_ms")})
    pick = "bf16" if "bf16" in dtypes else (dtypes[0] if dtypes else None)
    by_variant: dict[str, Series] = {}
    timed = [r for r in rows if r["dtype"] == pick and r.get("median_ms")]
    xs = {id(r): (x_of(parse(r["size"])) if x_of else r["bytes"]) for r in timed}
    for r in sorted(timed, key=lambda r: xs[id(r)]):
        s = by_variant.setdefault(r["variant"], Series(r["variant"], [], color=colors.get(r["variant"])))
        s.points.append((xs[id(r)], r[key]))
        s.labels.append(f"{r['variant']} {r['size']}: {fmt.format(r[key])} {unit}, {r['median_ms'] * 1e3:.1f} µs")
    return chart(f"{name}: size scaling ({pick})", list(by_variant.values()),
                 Axis(label), Axis(f"achieved {unit}", log=False))
