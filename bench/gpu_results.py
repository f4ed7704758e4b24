"""The GPU machine's benchmark (bench/gpu.sh): its results file and its docs/benchmarks.md block.

bench/gpu.sh leaves one JSON per part in its output directory (allreduce.json from
bench/nccl_allreduce.py, mfu-<preset>.json from bench/runtime_gpu.py, hf_import.json from
bench/hf_import.py). This collects them into ``gpu_results.json`` (with commit, date, machine
and command) and writes the table between ``<!-- bench: gpu -->`` and ``<!-- end bench -->``:

    python bench/gpu_results.py --out-dir DIR [--doc docs/benchmarks.md] [--command '...']
    python bench/gpu_results.py --results DIR/gpu_results.json --doc docs/benchmarks.md  # again, here

Every figure stands beside a peer of the same run or the GPU's nominal figure: all-reduce bus
bandwidth against the GPU's NVLink (or PCIe) rate, MFU against the peak bf16 FLOP/s of the
detected GPU and against a bf16 GEMM measured on it, the import against transformers.
Importable without torch (the helpers are unit-tested).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_common import DOC, RUNTIME_HEADING, SECTIONS, commit, write_result  # noqa: E402

GB = 1e9  # nccl-tests' GB/s are 10⁹ bytes/s

# Nominal GPU-to-GPU bandwidth per GPU and direction (GB/s) inside one node: NVLink where the part
# has it (H100/H200 SXM: 18 NVLink 4 links × 25 GB/s), else its PCIe slot. An all-reduce's busbw
# is comparable to it (nccl-tests' definition); NVLink SHARP on NVSwitch systems can exceed it.
NOMINAL_LINK_GBPS: dict[str, tuple[float, str]] = {
    "H100": (450.0, "NVLink 4"),
    "H100 NVL": (300.0, "NVLink bridge"),
    "H100 PCIe": (64.0, "PCIe 5.0 x16"),
    "H200": (450.0, "NVLink 4"),
    "H800": (200.0, "NVLink 4 (8 links)"),
    "H20": (450.0, "NVLink 4"),
    "B200": (900.0, "NVLink 5"),
    "GB200": (900.0, "NVLink 5"),
    "A100": (300.0, "NVLink 3"),
    "A100-PCIE": (32.0, "PCIe 4.0 x16"),
    "A800": (200.0, "NVLink 3 (8 links)"),
    "L40S": (32.0, "PCIe 4.0 x16"),
    "L4": (32.0, "PCIe 4.0 x16"),
    "A10G": (32.0, "PCIe 4.0 x16"),
}


def bus_bandwidth(algbw: float, world: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: algbw × 2(n−1)/n, what each GPU's link carries."""
    return algbw * 2 * (world - 1) / world if world > 0 else 0.0


def nominal_link(device_name: str) -> tuple[float, str] | None:
    """(GB/s per direction, link) of the GPU named so, longest key first (H100 PCIe before H100)."""
    for key in sorted(NOMINAL_LINK_GBPS, key=len, reverse=True):
        if key in device_name:
            return NOMINAL_LINK_GBPS[key]
    return None


def _size(nbytes: float) -> str:
    mib = nbytes / 2**20
    return f"{mib / 1024:g} GiB" if mib >= 1024 else f"{mib:g} MiB"


def _count(n: float) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:,.1f} M"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _flops(x: float | None) -> str:
    return "—" if not x else f"{x / 1e12:.1f} TFLOP/s" if x >= 1e11 else f"{x / 1e9:.1f} GFLOP/s"


def allreduce_table(ar: dict | None) -> str:
    if not ar:
        return "**All-reduce**: not measured (no result; allreduce.log in the run's output says why)."
    if ar.get("skipped"):
        return f"**All-reduce**: not measured: {ar['skipped']}"
    link = ar.get("nominal_link_gbps")
    head = (f"**All-reduce** (`torch.distributed.all_reduce`, {ar['backend']}, {ar['world']} × "
            f"{ar['device']}, {ar['dtype']}, {ar['iters']} iterations after {ar['warmup']} warm-up, the "
            f"slowest rank's mean): busbw = algbw × 2(n−1)/n; peer: "
            + (f"the GPU's nominal {ar['nominal_link']} rate, {link:g} GB/s per direction." if link
               else "none (no nominal link rate for this device)."))
    rows = ["| size | time | algbw | busbw | busbw / nominal |", "|---|---|---|---|---|"]
    for r in ar["rows"]:
        ratio = f"**{r['busbw_gbps'] / link:.2f}**" if link else "—"
        rows.append(f"| {_size(r['bytes'])} | {r['time_s'] * 1e3:.3f} ms | {r['algbw_gbps']:.1f} GB/s | "
                    f"{r['busbw_gbps']:.1f} GB/s | {ratio} |")
    return head + "\n\n" + "\n".join(rows)


def mfu_table(runs: list[dict]) -> str:
    if not runs:
        return "**MFU**: not measured (no result; mfu-*.log in the run's output say why)."
    first = runs[0]
    head = (f"**MFU of the built-in runtime**, one {first.get('device', '?')}, "
            f"{'fp32 (CPU)' if first.get('cpu_fallback') else 'bf16 autocast, selective activation checkpointing, fused AdamW'}, "
            f"synthetic data, the mean over the steps after the first two; peers: the device's peak "
            f"({_flops(first.get('peak_flops'))}, {first.get('peak_source', '?')}) and a "
            f"{first.get('gemm', {}).get('n', '?')}² {first.get('gemm', {}).get('dtype', '?')} GEMM measured on it "
            f"({_flops(first.get('gemm_flops'))}).")
    rows = ["| preset | params | seq × micro batch | tokens/s | achieved | MFU (of peak) | of measured GEMM | peak memory | loss first → last |",
            "|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        b = run.get("best")
        if not b:
            err = next((a.get("error") for a in reversed(run.get("attempts", [])) if a.get("error")), "no attempt finished")
            rows.append(f"| {run.get('preset_asked', '?')} | — | — | — | — | — | — | — | failed: {err[:120]} |")
            continue
        achieved = b["tokens_per_s"] * b["flops_per_token"]
        peak, gemm = run.get("peak_flops"), run.get("gemm_flops")
        losses = b.get("losses") or []
        rows.append(
            f"| {b['preset']} | {_count(b['params'])} | {b['seq_len']} × {b['micro_batch']} | {b['tokens_per_s']:,.0f} | "
            f"{_flops(achieved)} | **{_pct(achieved / peak if peak else None)}** | {_pct(achieved / gemm if gemm else None)} | "
            f"{b['peak_memory_gib']:.1f} GiB | "
            + (f"{losses[0]:.3f} → {losses[-1]:.3f} |" if losses else "— |"))
    return head + "\n\n" + "\n".join(rows)


def import_table(imp: dict | None) -> str:
    if not imp:
        return "**Hugging Face import**: not measured (no result; hf_import.log in the run's output says why)."
    m = imp["model"]
    head = (f"**Hugging Face import** of a Llama made here (`LlamaConfig` + `save_pretrained`, dim {m['dim']}, "
            f"{m['layers']} layers, vocab {m['vocab']:,}: {_count(m['params'])} parameters, "
            f"{m['size_mib']:.1f} MiB of bf16 safetensors), loaded as float32 on the CPU, each loader in a "
            f"fresh process; peer: transformers `from_pretrained`.")
    base = next((r["load_s"] for r in imp["rows"] if r["loader"].startswith("transformers")), None)
    rows = ["| loader | ranks | load time | vs transformers | peak RSS per rank |", "|---|---|---|---|---|"]
    for r in imp["rows"]:
        vs = f"{base / r['load_s']:.2f}× faster" if base and not r["loader"].startswith("transformers") else "—"
        rows.append(f"| {r['loader']} | {r['world']} | {r['load_s']:.2f} s | {vs} | {r['peak_rss_mib']:,.0f} MiB |")
    p = imp.get("parity")
    if p:
        tail = (f"\n\nParity on {p['device']} ({p['dtype']}, a fixed batch of {p['batch']} × {p['seq']} tokens): "
                f"logits max |Δ| / max |reference| = **{p['rel_diff']:.1e}** against transformers "
                f"(bound in tests/runtime/test_hf_import.py: 1e-5); load onto the device: Phalanx "
                f"{p['phalanx_load_s']:.2f} s, transformers {p['transformers_load_s']:.2f} s.")
        if p.get("error"):
            tail += f" ({p['error']})"
    else:
        tail = ""
    return head + "\n\n" + "\n".join(rows) + tail


def machine_line(res: dict) -> str:
    gpus = res.get("gpus") or []
    if not gpus:
        return res.get("machine", "?")
    extra = ", ".join(x for x in (res.get("driver") and f"driver {res['driver']}",
                                  res.get("cuda") and f"CUDA {res['cuda']}") if x)
    return f"{len(gpus)} × {gpus[0]}{f' ({extra})' if extra else ''}; {res.get('machine', '?')}"


def render(res: dict) -> str:
    """The block: the header (commit, date, machine, command), then a table per part."""
    dry = ("**DRY RUN (CPU, gloo, tiny models: checks the script, not a GPU result)** — " if res.get("dry_run") else "")
    header = (f"{dry}**{res['date']}**, commit {res['commit']} — {machine_line(res)}. "
              f"Command: `{res['command']}` ({res['total_s']:.0f} s).")
    parts = [header, allreduce_table(res.get("allreduce")), mfu_table(res.get("mfu") or []), import_table(res.get("hf_import"))]
    return "\n\n".join(parts)


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def collect(out_dir: Path, *, command: str, dry_run: bool, total_s: float) -> dict:
    """gpu_results.json from the parts' files in ``out_dir`` (a part missing: null)."""
    gpus, driver = [], None
    smi = out_dir / "nvidia-smi.csv"  # name, memory.total, driver_version
    if smi.exists():
        rows = [[c.strip() for c in line.split(",")] for line in smi.read_text().splitlines()[1:] if line.count(",") >= 2]
        gpus, driver = [r[0] for r in rows], (rows[0][2] if rows else None)
    env = _load(out_dir / "env.json") or {}
    mfu = [r for p in sorted(out_dir.glob("mfu-*.json")) if (r := _load(p))]
    mfu.sort(key=lambda r: (r.get("best") or {}).get("params", 0))
    return {"commit": env.get("commit") or commit(), "date": _dt.date.today().isoformat(),
            "machine": env.get("machine", "?"), "gpus": gpus or env.get("gpus", []), "driver": driver,
            "cuda": env.get("cuda") if gpus or env.get("gpus") else None, "command": command,
            "dry_run": dry_run, "total_s": total_s, "allreduce": _load(out_dir / "allreduce.json"),
            "mfu": mfu, "hf_import": _load(out_dir / "hf_import.json")}


def write_doc(res: dict, doc: Path) -> None:
    write_result("gpu", SECTIONS["gpu"], render(res), parent=RUNTIME_HEADING, doc=doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--out-dir", type=Path, help="bench/gpu.sh's output directory: collect, write gpu_results.json")
    src.add_argument("--results", type=Path, help="an existing gpu_results.json: only (re)write the doc")
    ap.add_argument("--doc", type=Path, default=DOC, help="the Markdown file whose gpu block is replaced")
    ap.add_argument("--command", default=os.environ.get("GPU_BENCH_COMMAND", "bench/gpu.sh"))
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--total-s", type=float, default=0.0)
    args = ap.parse_args()
    if args.out_dir:
        res = collect(args.out_dir, command=args.command, dry_run=args.dry_run, total_s=args.total_s)
        (args.out_dir / "gpu_results.json").write_text(json.dumps(res, indent=2) + "\n")
    else:
        res = json.loads(args.results.read_text())
    write_doc(res, args.doc)
    print(render(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
