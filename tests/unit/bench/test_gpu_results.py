"""bench/gpu_results.py: nccl-tests' bus bandwidth, the nominal link rate per GPU, the table."""

import pytest

from bench.gpu_results import bus_bandwidth, nominal_link, render, write_doc


@pytest.mark.parametrize(("world", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_busbw_is_algbw_times_2_n_minus_1_over_n(world, factor):
    assert bus_bandwidth(100.0, world) == pytest.approx(100.0 * factor)


@pytest.mark.parametrize(("name", "gbps"), [
    ("NVIDIA H100 80GB HBM3", 450.0), ("NVIDIA H100 PCIe", 64.0), ("NVIDIA H100 NVL", 300.0),
    ("NVIDIA H200", 450.0), ("NVIDIA GB200", 900.0), ("NVIDIA B200", 900.0),
    ("NVIDIA A100-SXM4-80GB", 300.0), ("NVIDIA A100-PCIE-40GB", 32.0), ("NVIDIA L4", 32.0),
    ("Some Future GPU", None),
])
def test_the_nominal_link_of_each_gpu(name, gbps):
    link = nominal_link(name)
    assert (link[0] if link else None) == gbps


GPU_RUN = {
    "commit": "abc1234", "date": "2026-12-07", "machine": "AMD EPYC, 16 cores", "gpus": ["NVIDIA H100 80GB HBM3"] * 8,
    "driver": "570.1", "cuda": "13.2", "command": "bench/gpu.sh", "dry_run": False, "total_s": 301.0,
    "allreduce": {"backend": "nccl", "world": 8, "device": "NVIDIA H100 80GB HBM3", "dtype": "float32", "warmup": 5,
                  "iters": 20, "nominal_link_gbps": 450.0, "nominal_link": "NVLink 4",
                  "rows": [{"bytes": 2**30, "time_s": 0.005, "algbw_gbps": 214.7, "busbw_gbps": 375.8}]},
    "mfu": [{"device": "NVIDIA H100 80GB HBM3", "cpu_fallback": False, "peak_flops": 989e12, "peak_source": "table:H100",
             "gemm": {"n": 8192, "dtype": "bfloat16"}, "gemm_flops": 700e12, "preset_asked": "125m",
             "best": {"preset": "125m", "params": 125_000_000, "seq_len": 2048, "micro_batch": 16, "tokens_per_s": 400_000.0,
                      "flops_per_token": 1e9, "peak_memory_gib": 30.0, "losses": [10.4, 7.1]}},
            {"preset_asked": "1b", "attempts": [{"error": "OOM: out of memory"}], "best": None}],
    "hf_import": {"model": {"dim": 1024, "layers": 8, "vocab": 32000, "params": 159_900_000, "size_mib": 305.0},
                  "rows": [{"loader": "transformers from_pretrained", "world": 1, "load_s": 4.0, "peak_rss_mib": 1659},
                           {"loader": "phalanx import (DCP, sharded)", "world": 1, "load_s": 0.5, "peak_rss_mib": 1494}],
                  "parity": {"device": "NVIDIA H100 80GB HBM3", "dtype": "float32", "batch": 2, "seq": 32,
                             "rel_diff": 3e-7, "transformers_load_s": 2.0, "phalanx_load_s": 0.4}},
}


def test_the_table_gives_each_figure_beside_its_peer():
    text = render(GPU_RUN)
    assert "8 × NVIDIA H100 80GB HBM3 (driver 570.1, CUDA 13.2)" in text and "commit abc1234" in text
    assert "| 1 GiB | 5.000 ms | 214.7 GB/s | 375.8 GB/s | **0.84** |" in text  # busbw / 450 GB/s NVLink
    # 400k tokens/s × 1 GFLOP per token = 400 TFLOP/s: 40.4 % of 989, 57.1 % of the measured GEMM
    assert "| 125m | 125.0 M | 2048 × 16 | 400,000 | 400.0 TFLOP/s | **40.4%** | 57.1% | 30.0 GiB | 10.400 → 7.100 |" in text
    assert "| 1b |" in text and "failed: OOM" in text  # a part that failed is said so, not left out
    assert "8.00× faster" in text and "**3.0e-07**" in text
    assert "DRY RUN" not in text


def test_a_missing_or_skipped_part_is_not_measured():
    text = render({**GPU_RUN, "gpus": ["NVIDIA H100 80GB HBM3"], "allreduce": {"skipped": "1 GPU: needs 2 or more", "world": 1},
                   "mfu": [], "hf_import": None, "dry_run": True})
    assert "**All-reduce**: not measured: 1 GPU" in text
    assert "**MFU**: not measured" in text and "**Hugging Face import**: not measured" in text
    assert text.startswith("**DRY RUN")


def test_the_block_replaces_its_previous_one(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Runtime\n\n### Runtime (e): a GPU machine (NCCL all-reduce, MFU in bf16, "
                   "Hugging Face import)\n\n<!-- bench: gpu -->\nNot run\n<!-- end bench -->\n\nProse stays.\n")
    write_doc(GPU_RUN, doc)
    write_doc(GPU_RUN, doc)
    text = doc.read_text()
    assert "Not run" not in text and text.count("<!-- bench: gpu -->") == 1 and text.count("commit abc1234") == 1
    assert text.index("<!-- end bench -->") < text.index("Prose stays.")
