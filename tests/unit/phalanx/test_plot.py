"""The per-step metrics log (runtime writer → `phalanx plot` reader) and the PNG."""

from __future__ import annotations

import json
import math

import pytest

from phalanx.cli import main
from phalanx.plot import ema, read_curves, smoothing, summary


def step_metrics(step, loss):
    from phalanx_runtime.components.metrics import StepMetrics

    return StepMetrics(step=step, loss=loss, grad_norm=1.0, lr=1e-3, step_time_s=0.5, tokens_per_s=2000.0,
                       tokens_per_s_per_device=1000.0, mfu=0.25, peak_memory_bytes=1 << 30)


def write_run(directory, steps):
    """What rank 0 writes: a line per step through StepLog (a new StepLog per gang)."""
    from phalanx_runtime.components.metrics import StepLog, metrics_log_path

    log = StepLog(metrics_log_path(directory))
    for step, loss in steps:
        log.write(step_metrics(step, loss))


def test_runtime_log_is_one_json_line_per_step(tmp_path):
    write_run(tmp_path, [(1, 4.0), (2, float("nan"))])
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert first["step"] == 1 and first["loss"] == 4.0 and first["tokens_per_s"] == 2000.0 and first["time"] > 1e9
    assert math.isnan(json.loads(lines[1])["loss"])


def test_a_resumed_gang_overrides_the_repeated_steps(tmp_path):
    write_run(tmp_path, [(s, 5.0 - 0.1 * s) for s in range(1, 15)])  # first gang dies after step 14
    write_run(tmp_path, [(s, 9.0) for s in range(11, 21)])  # resumed from the checkpoint at step 10
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 21, "lo')  # torn last line
    curves = read_curves(tmp_path)
    steps, loss = curves.series("loss")
    assert steps == list(range(1, 21))
    assert loss[9] == pytest.approx(4.0) and loss[10:] == [9.0] * 10  # steps 11-14: the resumed gang's values
    assert curves.resumes == [10]
    assert summary(curves) == "steps 1–20, loss 4.9000 → 9.0000, resumed from step 10"
    mfu_steps, mfu = curves.series("mfu", 100.0)
    assert mfu_steps == steps and mfu[0] == 25.0


def test_ema_is_debiased_and_skips_nan():
    assert ema([4.0, 2.0], alpha=0.5) == [4.0, pytest.approx((0.5 * 4.0 * 0.5 + 0.5 * 2.0) / 0.75)]
    assert ema([3.0, float("nan"), 3.0], alpha=0.1) == pytest.approx([3.0, 3.0, 3.0])
    assert ema([], alpha=0.1) == []
    assert smoothing(30) == pytest.approx(1 / 3) and smoothing(10_000) == 0.02 and smoothing(5) == 0.5


def test_phalanx_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    write_run(tmp_path, [(s, 5.0 / s) for s in range(1, 31)])
    out = tmp_path / "curves.png"
    assert main(["plot", str(tmp_path), "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert "steps 1–30, loss 5.0000 → 0.1667" in capsys.readouterr().out


def test_phalanx_plot_without_steps_fails_clearly(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text("")
    assert main(["plot", str(tmp_path), "-o", str(tmp_path / "x.png")]) == 1
    assert "no steps logged" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "nowhere")]) == 2  # no such file


def write_reported(directory, records):
    """What phalanx_common.report writes for a command job: step, loss, tokens_per_s, time and the
    reported metrics (flat or under "metrics")."""
    with (directory / "metrics.jsonl").open("a") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


@pytest.mark.parametrize("record, key, value", [
    ({"step": 1, "eval_loss": 2.5}, "eval_loss", 2.5),
    ({"step": 1, "metrics": {"eval_loss": 2}}, "eval_loss", 2.0),
    ({"step": 1, "metrics": {"eval_loss": True}}, "eval_loss", None),
    ({"step": 1, "metrics": "junk", "loss": 1}, "eval_loss", None),
    ({"step": 1, "loss": 1}, "loss", 1.0),
])
def test_a_reported_metric_is_a_curve(record, key, value):
    from phalanx.plot import record_value

    assert record_value(record, key) == value


def test_a_command_jobs_log_plots_the_panels_it_has(tmp_path):
    from phalanx.plot import panels

    write_reported(tmp_path, [{"step": s, "loss": 3.0 / s, "tokens_per_s": 100.0, "time": 1.8e9 + s,
                               "metrics": {"eval_loss": 3.5 / s}} for s in range(1, 6)])
    curves = read_curves(tmp_path)
    assert [p[0] for p in panels(curves)] == ["loss", "tokens_per_s"]  # no MFU or step time logged
    assert [p[0] for p in panels(curves, ("eval_loss", "loss"))] == ["loss", "tokens_per_s", "eval_loss"]
    assert curves.series("eval_loss") == ([1, 2, 3, 4, 5], [3.5 / s for s in range(1, 6)])


def test_phalanx_plot_draws_a_reported_metric(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    write_reported(tmp_path, [{"step": s, "loss": 3.0 / s, "eval_accuracy": s / 10} for s in range(1, 11)])
    out = tmp_path / "m.png"
    assert main(["plot", str(tmp_path), "-o", str(out), "--metric", "eval_accuracy", "--metric", "absent"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    captured = capsys.readouterr()
    assert "no values of absent logged" in captured.err and "steps 1–10" in captured.out
